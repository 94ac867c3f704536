"""Served speed: the generated model class against vLLM's own and vLLM's Transformers
backend, same engine, same requests.

    python benchmarks/serve.py                  # every served family vLLM also ships
    python benchmarks/serve.py llava_next qwen2_5_vl --rounds 2
    python benchmarks/serve.py --write          # also rewrite docs/performance.md's section
    python benchmarks/serve.py --towers published --write   # towers at published size

For each family: its synthetic snapshot, the generated port (``mmport
scaffold``), one tiny twin checkpoint in the hub layout (the one vLLM's own
classes load), and one set of requests: per modality the family handles,
images of mixed sizes, a few videos, a few audio clips, each in a prompt of
its own with the family's placeholder. The serve environment
(``MMPORT_SERVE_PYTHON``) then starts one engine per class and round (the
generated class, vLLM's own, and vLLM's Transformers backend,
``model_impl="transformers"``: HF's modeling code run on vLLM's attention),
rotating which class goes first, with the same settings (float32, eager,
no processor or prefix cache, so every request is processed and encoded),
warms it on one request and times ``--passes`` ``generate`` calls over all
of them, the median kept (``benchmarks/_serve_engine.py``). Reported per class: requests/s, the mean
time to first token (vLLM's request stats; all requests are queued at once,
so it includes queueing) and the encoder's time per item (``embed_multimodal``
timed in the worker); each ratio is generated / the control's throughput,
the median over rounds of the paired runs, with their range where there are
several rounds.

``--towers published`` gives the towers of the families in
``_published.PUBLISHED_TOWERS`` a published checkpoint's geometry (random
weights; the language model stays tiny), so the encoder's cost shows.
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

from _published import PUBLISHED_TOWERS, published_tower_config
from docsections import write_section

ROOT = Path(__file__).resolve().parents[1]
ENGINE = Path(__file__).with_name("_serve_engine.py")
SECTION = "## Served throughput: generated class / vLLM's own"
PUBLISHED_SECTION = "## Encoder time at published tower sizes"
# The classes timed, in the order of the first round, and how each engine is set.
SIDES = ("generated", "own", "transformers")

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
    "qwen2_audio",
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
    """Every class's timings over the rounds, or why the family (or one control) was
    not timed."""

    model_type: str
    architecture: str = ""
    requests: int = 0
    generated: list[Timing] = field(default_factory=list)
    own: list[Timing] = field(default_factory=list)
    transformers: list[Timing] = field(default_factory=list)
    error: str = ""
    # A control that did not serve (vLLM's Transformers backend refusing the family).
    side_errors: dict[str, str] = field(default_factory=dict)

    def ratios(self, control: str) -> list[float]:
        """Generated / ``control`` throughput of each round's paired runs."""
        return [
            g.throughput / c.throughput
            for g, c in zip(self.generated, getattr(self, control), strict=False)
        ]

    def ratio_of(self, control: str) -> float | None:
        """The median of :meth:`ratios`."""
        paired = self.ratios(control)
        return statistics.median(paired) if paired else None

    @property
    def ratio(self) -> float | None:
        """Median generated / vLLM's own throughput over the rounds."""
        return self.ratio_of("own")

    def spread(self, control: str) -> str:
        """The median ratio and, over several rounds, its range."""
        paired = self.ratios(control)
        if not paired:
            return self.side_errors.get(control, "-")[:80] or "-"
        median = f"**{statistics.median(paired):.2f}**"
        if len(paired) < 2:
            return median
        return f"{median} ({min(paired):.2f}-{max(paired):.2f})"


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
    model_type: str,
    python: Path,
    rounds: int,
    timeout_s: int,
    passes: int = 5,
    published: bool = False,
) -> FamilyResult:
    """Scaffold, build the twin (``published``: with the published tower), time every
    class ``rounds`` times (each the median of ``passes`` passes over the requests in
    one engine)."""
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
        config = (
            published_tower_config(model_type, snapshot.load_config())
            if published
            else None
        )
        checkpoint = build_checkpoint(
            snapshot, workdir / "twin", layout=Layout.HUB, config=config
        )
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
            "transformers": {
                **base,
                "port_dir": None,
                "module": None,
                "model_impl": "transformers",
            },
        }
        for round_ in range(rounds):
            shift = round_ % len(SIDES)
            for side in SIDES[shift:] + SIDES[:shift]:
                if side in result.side_errors:
                    continue
                answer = run_engine(python, sides[side], workdir, timeout_s, ENGINE)
                if "error" in answer:
                    why = answer["error"].splitlines()[0][:300]
                    if side == "transformers":  # a control that cannot serve the family
                        result.side_errors[side] = why
                        continue
                    result.error = f"{side}: {why}"
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


def _side(timings: list[Timing]) -> tuple:
    """(requests/s, mean TTFT ms, encoder ms/item), medians over the rounds."""
    return (
        _median([t.throughput for t in timings]),
        _median([1000 * statistics.mean(t.ttft) if t.ttft else None for t in timings]),
        _median([t.encoder_ms_per_item for t in timings]),
    )


def table(results: list[FamilyResult]) -> str:
    """The Markdown table: per family, every class's figures and the ratios."""
    lines = [
        "| model_type | requests | req/s (gen / own / TF) | gen / own | gen / TF backend | TTFT ms (gen / own / TF) | encoder ms/item (gen / own / TF) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.error:
            lines.append(
                f"| {r.model_type} | {r.requests} | - | - | - | - | {r.error} |"
            )
            continue
        sides = [_side(getattr(r, name)) for name in SIDES]
        rps, ttft, enc = (
            " / ".join(_fmt(side[i], spec) for side in sides)
            for i, spec in enumerate((".2f", ".0f", ".1f"))
        )
        lines.append(
            f"| {r.model_type} | {r.requests} | {rps} | {r.spread('own')} | "
            f"{r.spread('transformers')} | {ttft} | {enc} |"
        )
    return "\n".join(lines)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*")
    parser.add_argument("--rounds", type=int, default=1, help="engine runs per class")
    parser.add_argument(
        "--passes", type=int, default=5, help="timed passes per engine (median kept)"
    )
    parser.add_argument(
        "--timeout", type=int, default=900, help="seconds per engine run"
    )
    parser.add_argument(
        "--towers",
        choices=("tiny", "published"),
        default="tiny",
        help="the twin's towers, or those of the published checkpoints (_published.py)",
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite docs/performance.md's section"
    )
    args = parser.parse_args()
    published = args.towers == "published"
    args.families = args.families or list(PUBLISHED_TOWERS if published else FAMILIES)
    unknown = [f for f in args.families if published and f not in PUBLISHED_TOWERS]
    if unknown:
        parser.error(f"no published tower geometry for {', '.join(unknown)}")
    return args


def _summary(results: list[FamilyResult]) -> str:
    """The figures the section's first paragraph gives."""
    parts = []
    for control, name in (
        ("own", "vLLM's own"),
        ("transformers", "Transformers backend"),
    ):
        ratios = [r.ratio_of(control) for r in results]
        present = [x for x in ratios if x is not None]
        if present:
            parts.append(
                f"generated / {name} throughput median {statistics.median(present):.2f}, "
                f"lowest {min(present):.2f} ({len(present)} families)"
            )
    return "; ".join(parts) or "no family timed"


def main() -> None:
    """Benchmark the families named (default: all of FAMILIES)."""
    args = _arguments()
    python = Path(
        os.environ.get("MMPORT_SERVE_PYTHON", "/opt/mmport-vllm-serve-venv/bin/python")
    )
    if not python.exists():
        sys.exit(
            f"no serve environment at {python} (shared/recipes/vllm-cpu-serve-env.sh)"
        )
    published = args.towers == "published"
    started = time.perf_counter()
    results = []
    for family in args.families:
        print(f"… {family}", file=sys.stderr, flush=True)
        try:
            results.append(
                bench_family(
                    family, python, args.rounds, args.timeout, args.passes, published
                )
            )
        except Exception as exc:  # a family that cannot be set up is a row, not a stop
            results.append(
                FamilyResult(family, error=f"{type(exc).__name__}: {exc}"[:300])
            )
        print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    minutes = (time.perf_counter() - started) / 60
    section = PUBLISHED_SECTION if published else SECTION
    towers = (
        "each family's tower at a published checkpoint's geometry ("
        + "; ".join(f"{f}: {PUBLISHED_TOWERS[f][0]}" for f in args.families)
        + "), random weights, the language model the tiny twin's"
        if published
        else "the same tiny twin (hub layout)"
    )
    text = (
        f"{section}\n\n"
        f"Generated by `python benchmarks/serve.py --towers {args.towers} --rounds "
        f"{args.rounds} --write` (vLLM's CPU engine, {os.cpu_count()} cores, "
        f"{args.rounds} round(s) per class, the median of {args.passes} passes each, "
        f"{minutes:.1f} min): {towers}, the same requests, one engine per class and "
        "round, the order rotated each round; ratios are the median of the paired "
        "runs, their range in brackets; see the benchmark's docstring for what each "
        f"column measures. {_summary(results)}.\n\n{table(results)}\n"
    )
    print(text)
    if args.write:
        write_section(section, text)


if __name__ == "__main__":
    main()
