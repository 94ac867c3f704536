"""Where and in what precision the HF model runs for ``verify --model``.

``auto`` means CUDA when ``torch.cuda.is_available()``, the CPU otherwise;
asking for CUDA where there is none is a user error (exit 2), not a silent
fallback. Tolerances grow with the precision's rounding error.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mmport.errors import DeviceError

__all__ = [
    "DEVICES",
    "DTYPES",
    "Placement",
    "free_memory_bytes",
    "placement",
    "release",
    "seeded",
]

DEVICES = ("auto", "cuda", "cpu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# Largest |Δ| allowed between two logits runs, relative to the logits' scale.
_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


@dataclass(frozen=True)
class Placement:
    """The device and dtype the model runs in, and the logits tolerance they imply."""

    device: Any  # torch.device
    dtype: Any  # torch.dtype

    @property
    def dtype_name(self) -> str:
        """``float32``, ``bfloat16`` or ``float16``."""
        return str(self.dtype).removeprefix("torch.")

    def tolerance(self, scale: float) -> float:
        """The largest acceptable logits difference for logits of magnitude ``scale``."""
        return _TOLERANCE[self.dtype_name] * max(1.0, scale)


def placement(device: str = "auto", dtype: str = "auto") -> Placement:
    """Resolve ``--device`` and ``--dtype``; CUDA asked for and absent is a DeviceError."""
    import torch

    if device not in DEVICES:
        raise DeviceError(f"unknown device '{device}'; use one of {', '.join(DEVICES)}")
    if dtype not in DTYPES:
        raise DeviceError(f"unknown dtype '{dtype}'; use one of {', '.join(DTYPES)}")
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise DeviceError(
            "--device cuda was asked for but torch sees no CUDA device; use --device cpu or auto"
        )
    chosen = torch.device(
        "cuda" if device == "cuda" or (device == "auto" and has_cuda) else "cpu"
    )
    if dtype == "auto":
        # bfloat16 is what GPUs serve in; on a CPU it is slow and float32 is exact enough.
        dtype = "bfloat16" if chosen.type == "cuda" else "float32"
    return Placement(chosen, getattr(torch, dtype))


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch's CPU and CUDA generators, restoring the CPU state afterwards."""
    import torch

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # seeds every CUDA device too
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def release(target: Placement) -> None:
    """Free what the last probe left behind (cached CUDA blocks included)."""
    gc.collect()
    if target.device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def free_memory_bytes(target: Placement) -> int:
    """Memory available for the model on the target device."""
    if target.device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(target.device)[0]
    try:  # MemAvailable counts reclaimable page cache; free pages alone would not
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
