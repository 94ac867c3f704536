"""Greedy generation in a real vLLM engine: the serve environment's side of ``verify --serve``.

Run by the serve environment's python (``MMPORT_SERVE_PYTHON``), never
imported by mmport itself: it needs only the standard library, vLLM and
PIL. It reads one JSON request and writes one JSON answer::

    python _engine.py request.json answer.json

request: ``{"checkpoint": DIR, "port_dir": DIR or null, "module": "llava",
"architecture": "LlavaForConditionalGeneration", "max_tokens": 4,
"max_model_len": 2048, "prompts": [{"prompt": "...", "images": [PNG, ...],
"videos": [[NPY, metadata], ...], "audios": [[NPY, rate], ...]}],
"tensor_parallel_size": 1}``.
With ``port_dir`` the generated model file's ``register()`` puts the port's
class in vLLM's registry before the engine starts; without it vLLM serves the
checkpoint with its own class (the control). The answer holds, per prompt,
the prompt's token ids, the generated ids and the first step's logprob of the
chosen token, and whether the engine attended causally where the model asks
for bidirectional attention over media (``mm_prefix_dropped``), or
``{"error": "..."}`` when the engine could not start or run. With
``"features": true`` the engine runs one request at a time and keeps what the
model's ``embed_multimodal`` returned, each item's rows in the prompts' order,
in ``features.pt`` beside the request (``features_file``).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

# The engine runs in this process, so a class registered here is the one used
# (see shared/recipes/vllm-cpu-serve-env.sh).
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

# The generated files import each other relatively (`from .llava_processing import ...`).
_PACKAGE = "mmport_served_port"
# mmport.errors.FOREIGN_ERRORS written out (this script runs where mmport is not
# importable): whatever vLLM or the port raises, where that failure is the answer.
FOREIGN_ERRORS: tuple[type[Exception], ...] = (Exception,)


def _register_port(port_dir: str, module: str) -> str:
    """Import the port as a package and call its ``register()``; return the class's file.

    The package is also made a vLLM plugin (a ``vllm.general_plugins`` entry
    point in a ``.dist-info`` beside it, on ``sys.path``), which is how the
    class reaches worker processes: tensor-parallel ranks are spawned, start
    from an empty model registry and load every general plugin first.
    """
    root = Path(tempfile.mkdtemp(prefix="mmport-serve-port-"))
    package = root / _PACKAGE
    shutil.copytree(
        port_dir, package, ignore=shutil.ignore_patterns("test_*", "__pycache__")
    )
    (package / "__init__.py").touch()
    info = root / f"{_PACKAGE}-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {_PACKAGE}\nVersion: 0.0\n"
    )
    (info / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\n{_PACKAGE} = {_PACKAGE}.{module}:register\n"
    )
    sys.path.insert(0, str(root))
    # Spawned ranks take the parent's sys.path from the environment's view too.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(root), os.environ.get("PYTHONPATH", "")])
    )
    loaded = importlib.import_module(f"{_PACKAGE}.{module}")
    loaded.register()
    return str(loaded.__file__)


def _parallel(ranks: int) -> dict:
    """``LLM`` arguments for ``ranks`` tensor-parallel ranks on this CPU engine.

    vLLM's CPU workers bind their threads per NUMA node and refuse more ranks
    than nodes; one core per rank is bound instead (``VLLM_CPU_OMP_THREADS_BIND``).
    """
    if ranks <= 1:
        return {}
    cores = os.cpu_count() or 1
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ and cores >= ranks:
        per = cores // ranks
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            f"{r * per}-{(r + 1) * per - 1}" if per > 1 else str(r)
            for r in range(ranks)
        )
    return {"tensor_parallel_size": ranks, "distributed_executor_backend": "mp"}


def _multi_modal_data(probe: dict) -> dict:
    """A probe's items as vLLM's loaders hand them on: PIL images, ``(frames, metadata)`` videos, ``(samples, rate)`` audio."""
    import numpy as np
    from PIL import Image

    data: dict = {}
    if probe.get("images"):
        data["image"] = [Image.open(path).convert("RGB") for path in probe["images"]]
    if probe.get("videos"):
        data["video"] = [(np.load(path), meta) for path, meta in probe["videos"]]
    if probe.get("audios"):
        data["audio"] = [(np.load(path), rate) for path, rate in probe["audios"]]
    return data


def start_engine(request: dict, **settings) -> tuple:
    """The request's engine (float32, eager, seeded; ``settings`` added) and its prompts' items.

    Also used by ``benchmarks/_serve_engine.py``, which times the same engine.
    """
    from vllm import LLM

    items = [_multi_modal_data(probe) for probe in request["prompts"]]
    limits = {
        modality: max(len(data.get(modality, ())) for data in items)
        for modality in ("image", "video", "audio")
        if any(modality in data for data in items)
    }
    llm = LLM(
        model=request["checkpoint"],
        dtype="float32",
        enforce_eager=True,
        max_model_len=request["max_model_len"],
        limit_mm_per_prompt=limits or {"image": 1},
        seed=0,
        **_parallel(request.get("tensor_parallel_size", 1)),
        **settings,
    )
    return llm, items


def _keep_features(model) -> None:
    """Wrap the model's ``embed_multimodal`` so it keeps each item's rows, in order."""
    inner = model.embed_multimodal
    model._mmport_features = []

    def kept(**kwargs):
        out = inner(**kwargs)
        model._mmport_features += [
            item.detach().reshape(-1, item.shape[-1]).float().cpu() for item in out
        ]
        return out

    model.embed_multimodal = kept


def _read_features(model) -> list:
    """The rows :func:`_keep_features` kept (a top-level function: tensor-parallel
    workers take it by name)."""
    return model._mmport_features


def _kept_features(llm, request: dict) -> str:
    """Write the items' rows the model embedded (the first worker's) and say where."""
    import torch

    rows = llm.apply_model(_read_features)[0]
    path = Path(request["workdir"]) / "features.pt"
    torch.save(rows, path)
    return str(path)


def _generate(request: dict) -> tuple[list[dict], bool | None]:
    from vllm import SamplingParams

    features = bool(request.get("features"))
    # One request at a time: the items reach the encoder in the prompts' order.
    llm, items = start_engine(request, **({"max_num_seqs": 1} if features else {}))
    if features:
        llm.apply_model(_keep_features)
    params = SamplingParams(
        temperature=0.0, max_tokens=request["max_tokens"], logprobs=1
    )
    inputs = [
        {"prompt": probe["prompt"], "multi_modal_data": data}
        if data
        else probe["prompt"]
        for probe, data in zip(request["prompts"], items, strict=True)
    ]
    answers = []
    for output in llm.generate(inputs, params, use_tqdm=False):
        completion = output.outputs[0]
        first = (
            completion.logprobs[0][completion.token_ids[0]].logprob
            if completion.token_ids
            else None
        )
        answers.append(
            {
                "prompt_ids": list(output.prompt_token_ids),
                "tokens": list(completion.token_ids),
                "first_logprob": first,
            }
        )
    if features:
        request["features_file"] = _kept_features(llm, request)
    return answers, _mm_prefix_dropped(llm)


def _mm_prefix_dropped(llm) -> bool | None:
    """Whether the model asks for bidirectional attention over its media
    positions (vLLM's ``is_mm_prefix_lm``: Gemma 3, PaliGemma) and the attention
    backend in use cannot give it (vLLM's CPU backend), so the engine attends
    causally there; None when the engine does not say."""

    def layers(model) -> list[tuple[bool, bool]]:
        return [
            (bool(m.use_mm_prefix), bool(m.attn_backend.supports_mm_prefix()))
            for m in model.modules()
            if hasattr(m, "use_mm_prefix") and hasattr(m, "attn_backend")
        ]

    try:
        found = [
            layer for per_worker in llm.apply_model(layers) for layer in per_worker
        ]
    except FOREIGN_ERRORS:  # an engine without apply_model or these attributes: unknown
        return None
    return any(wanted and not supported for wanted, supported in found)


def port_frame(exc: BaseException, package: str = _PACKAGE) -> str | None:
    """Where in the port's own files (those of ``package``) the error was raised last
    (``llava.py:120 in embed_multimodal``); also used by ``_construct.py``."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if f"{os.sep}{package}" in f.filename
    ]
    if not frames:
        return None
    last = frames[-1]
    return f"{Path(last.filename).name}:{last.lineno} in {last.name}: {(last.line or '').strip()}"


def main(request_path: str, answer_path: str) -> None:
    """Run one request, write one answer; every failure becomes ``{"error": ...}``."""
    request = json.loads(Path(request_path).read_text())
    answer: dict = {}
    try:
        import vllm

        answer["vllm_version"] = vllm.__version__
        if request.get("port_dir"):
            answer["served_class_file"] = _register_port(
                request["port_dir"], request["module"]
            )
        answer["outputs"], answer["mm_prefix_dropped"] = _generate(request)
        answer["features_file"] = request.get("features_file")
    except BaseException as exc:  # the answer says what broke; the caller reports it
        answer["error"] = f"{type(exc).__name__}: {exc}"
        answer["traceback"] = traceback.format_exc(limit=-8)
        answer["port_frame"] = port_frame(exc)
    Path(answer_path).write_text(json.dumps(answer))
    if os.environ.get("MMPORT_SERVE_DEBUG"):
        print(json.dumps(answer)[:3000], file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
