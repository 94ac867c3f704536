"""Served speed: the generated model class against vLLM's own, same engine, same requests.

    python benchmarks/serve.py                  # every served family vLLM also ships
    python benchmarks/serve.py llava_next qwen2_5_vl --rounds 2
    python benchmarks/serve.py --write          # also rewrite docs/performance.md's section

For each family: its synthetic snapshot, the generated port (``mmport
scaffold``), one tiny twin checkpoint in the hub layout (the one vLLM's own
classes load), and one set of requests: per modality the family handles,
images of mixed sizes, a few videos, a few audio clips, each in a prompt of
its own with the family's placeholder. The serve environment
(``MMPORT_SERVE_PYTHON``) then starts one engine per class and round,
alternating which class goes first, with the same settings (float32, eager,
no processor or prefix cache, so every request is processed and encoded),
warms it on one request and times ``--passes`` ``generate`` calls over all
of them, the median kept (``benchmarks/_serve_engine.py``). Reported per class: requests/s, the mean
time to first token (vLLM's request stats; all requests are queued at once,
so it includes queueing) and the encoder's time per item (``embed_multimodal``
timed in the worker); the ratio is generated / vLLM's own throughput, the
median over rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from docsections import write_section

ROOT = Path(__file__).resolve().parents[1]
ENGINE = Path(__file__).with_name("_serve_engine.py")
SECTION = "## Served throughput: generated class / vLLM's own"

# The families `verify --serve` passes whose architecture vLLM's CPU engine also
# serves with its own class (tests/test_serve.py, docs/vllm.md). Where a family's
# default config cannot run its own processor's outputs, the snapshot with its
# published checkpoints' geometry stands in, as in the serve tests.
FAMILIES = (
    "llava",
    "llava_next",
    "paligemma",
    "gemma3",
    "mistral3",
    "idefics3",
    "qwen2_vl",
    "qwen2_5_vl",
    "llava_next_video",
    "llava_onevision",
    "glmasr",
    "audioflamingo3",
)
CHECKPOINT_SNAPSHOTS = {
    "gemma3": "gemma3_896_snapshot",
    "idefics3": "idefics3_364_snapshot",
    "mistral3": "mistral3_small31_snapshot",
}


def _reference(model_type: str, directory: Path) -> str:
    """The REF a family is served from: its synthetic snapshot, or the checkpoint-geometry one."""
    builder = CHECKPOINT_SNAPSHOTS.get(model_type)
    if builder is None:
        return model_type
    sys.path.insert(0, str(ROOT / "tests"))
    import snapshots

    return str(getattr(snapshots, builder)(directory / "snapshot"))


IMAGE_SIZES = ((96, 64), (40, 120), (224, 224), (320, 200), (64, 64), (160, 96))
# (frames, width, height) at 3 fps.
VIDEOS = ((4, 64, 48), (8, 48, 64), (6, 96, 64))
AUDIO_SECONDS = (1.0, 2.5, 4.0)
MAX_TOKENS = 8


@dataclass
class Timing:
    """One engine's timed pass."""

    seconds: float
    requests: int
    ttft: list[float]
    encoder_seconds: float
    encoder_items: int

    @property
    def throughput(self) -> float:
        """Requests per second."""
        return self.requests / self.seconds

    @property
    def encoder_ms_per_item(self) -> float | None:
        """Milliseconds the encoder took per item returned."""
        if not self.encoder_items:
            return None
        return 1000 * self.encoder_seconds / self.encoder_items


@dataclass
class FamilyResult:
    """Both classes' timings over the rounds, or why the family was not timed."""

    model_type: str
    architecture: str = ""
    requests: int = 0
    generated: list[Timing] = field(default_factory=list)
    own: list[Timing] = field(default_factory=list)
    error: str = ""

    @property
    def ratio(self) -> float | None:
        """Median generated/own throughput over the rounds."""
        if not (self.generated and self.own):
            return None
        return statistics.median(
            g.throughput / o.throughput
            for g, o in zip(self.generated, self.own, strict=False)
        )


def _requests(placeholders: dict, sampling_rate: int | None, directory: Path) -> list:
    """One prompt per item: images of mixed sizes, videos, audio clips."""
    import numpy as np
    from PIL import Image

    from mmport.media import make_audio, make_video, video_metadata

    rng = np.random.default_rng(0)
    prompts = []
    if "image" in placeholders:
        for index, (width, height) in enumerate(IMAGE_SIZES):
            path = directory / f"image-{index}.png"
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(path)
            prompts.append(
                {"prompt": _text(placeholders["image"], index), "images": [str(path)]}
            )
    if "video" in placeholders:
        for index, (frames, width, height) in enumerate(VIDEOS):
            path = directory / f"video-{index}.npy"
            np.save(path, make_video(frames, width, height, index))
            meta = video_metadata(frames, width, height, 3.0)
            prompts.append(
                {
                    "prompt": _text(placeholders["video"], index),
                    "videos": [[str(path), meta]],
                }
            )
    if "audio" in placeholders and sampling_rate:
        for index, seconds in enumerate(AUDIO_SECONDS):
            path = directory / f"audio-{index}.npy"
            np.save(path, make_audio(int(seconds * sampling_rate), index))
            prompts.append(
                {
                    "prompt": _text(placeholders["audio"], index),
                    "audios": [[str(path), sampling_rate]],
                }
            )
    return prompts


def _text(placeholder: str | None, index: int) -> str:
    """A short prompt around one item (text only where HF inserts the item itself)."""
    return f"Describe item {index}: {placeholder or ''} briefly."


def bench_family(
    model_type: str, python: Path, rounds: int, timeout_s: int, passes: int = 5
) -> FamilyResult:
    """Scaffold, build the twin, time both classes ``rounds`` times (each the median of
    ``passes`` passes over the requests in one engine)."""
    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.serve import run_engine
    from mmport.serve.checkpoint import Layout, build_checkpoint
    from mmport.sources import resolve
    from mmport.verify.reference import HFReference

    result = FamilyResult(model_type)
    with tempfile.TemporaryDirectory(prefix=f"mmport-bench-{model_type}-") as tmp:
        workdir = Path(tmp)
        snapshot = resolve(_reference(model_type, workdir))
        spec = analyze(snapshot)
        write_files(render_port(spec), workdir / "port", force=True)
        checkpoint = build_checkpoint(snapshot, workdir / "twin", layout=Layout.HUB)
        result.architecture = checkpoint.architecture
        reference = HFReference(snapshot)
        prompts = _requests(reference.placeholders(), reference.sampling_rate, workdir)
        result.requests = len(prompts)
        base = {
            "checkpoint": str(checkpoint.path),
            "architecture": checkpoint.architecture,
            "max_tokens": MAX_TOKENS,
            "max_model_len": 4096,
            "prompts": prompts,
            "warmup": 1,
            "passes": passes,
        }
        sides = {
            "generated": {
                **base,
                "port_dir": str(workdir / "port"),
                "module": spec.module_name,
            },
            "own": {**base, "port_dir": None, "module": None},
        }
        for round_ in range(rounds):
            order = ("generated", "own") if round_ % 2 == 0 else ("own", "generated")
            for side in order:
                answer = run_engine(python, sides[side], workdir, timeout_s, ENGINE)
                if "error" in answer:
                    result.error = f"{side}: {answer['error'].splitlines()[0][:300]}"
                    return result
                getattr(result, side).append(
                    Timing(
                        answer["seconds"],
                        answer["requests"],
                        answer["ttft"],
                        answer["encoder_seconds"],
                        answer["encoder_items"],
                    )
                )
    return result


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(results: list[FamilyResult]) -> str:
    """The Markdown table: per family, both classes' figures and the ratio."""
    lines = [
        "| model_type | requests | generated req/s | vLLM's own req/s | ratio | TTFT ms (gen / own) | encoder ms/item (gen / own) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.error:
            lines.append(
                f"| {r.model_type} | {r.requests} | - | - | - | - | {r.error} |"
            )
            continue

        def side(timings: list[Timing]) -> tuple:
            return (
                _median([t.throughput for t in timings]),
                _median(
                    [
                        1000 * statistics.mean(t.ttft) if t.ttft else None
                        for t in timings
                    ]
                ),
                _median([t.encoder_ms_per_item for t in timings]),
            )

        (g_rps, g_ttft, g_enc), (o_rps, o_ttft, o_enc) = side(r.generated), side(r.own)
        lines.append(
            f"| {r.model_type} | {r.requests} | {_fmt(g_rps, '.2f')} | {_fmt(o_rps, '.2f')} | "
            f"**{_fmt(r.ratio, '.2f')}** | {_fmt(g_ttft, '.0f')} / {_fmt(o_ttft, '.0f')} | "
            f"{_fmt(g_enc, '.1f')} / {_fmt(o_enc, '.1f')} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Benchmark the families named (default: all of FAMILIES)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--rounds", type=int, default=1, help="engine runs per class")
    parser.add_argument(
        "--passes", type=int, default=5, help="timed passes per engine (median kept)"
    )
    parser.add_argument(
        "--timeout", type=int, default=900, help="seconds per engine run"
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite docs/performance.md's section"
    )
    args = parser.parse_args()
    python = Path(
        os.environ.get("MMPORT_SERVE_PYTHON", "/opt/mmport-vllm-serve-venv/bin/python")
    )
    if not python.exists():
        sys.exit(
            f"no serve environment at {python} (shared/recipes/vllm-cpu-serve-env.sh)"
        )
    started = time.perf_counter()
    results = []
    for family in args.families:
        print(f"… {family}", file=sys.stderr, flush=True)
        try:
            results.append(
                bench_family(family, python, args.rounds, args.timeout, args.passes)
            )
        except Exception as exc:  # a family that cannot be set up is a row, not a stop
            results.append(
                FamilyResult(family, error=f"{type(exc).__name__}: {exc}"[:300])
            )
        print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    minutes = (time.perf_counter() - started) / 60
    body = table(results)
    ratios = [r.ratio for r in results if r.ratio is not None]
    summary = (
        f"{len(ratios)} families timed; generated/own throughput median "
        f"{statistics.median(ratios):.2f}, lowest {min(ratios):.2f}"
        if ratios
        else "no family timed"
    )
    text = (
        f"{SECTION}\n\n"
        "Generated by `python benchmarks/serve.py --write` (vLLM's CPU engine, "
        f"{os.cpu_count()} cores, {args.rounds} round(s) per class, the median of "
        f"{args.passes} passes each, {minutes:.1f} min): "
        "the same tiny twin (hub layout), the same requests, one engine per class and round; "
        "see the benchmark's docstring for what each column measures. "
        f"{summary}.\n\n{body}\n"
    )
    print(text)
    if args.write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
