"""Benchmarks: static analysis, verify's overhead over HF, test lanes.

    python benchmarks/bench.py            # print the figures
    python benchmarks/bench.py --write    # also rewrite docs/performance.md
    python benchmarks/bench.py --lanes    # also time the test lanes from a fresh clone

Figures are medians over repeats on this machine; they are measurements, not
test thresholds.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from docsections import DOC, join, others

MODELS = (
    "llava",
    "paligemma",
    "qwen2_vl",
    "idefics3",
    "llava_next_video",
    "qwen2_audio",
)
ROOT = Path(__file__).resolve().parents[1]
# verify --model: default configs where they run, real geometry where the
# default config cannot run its own processor's outputs (see docs/model-check.md).
MODEL_REFS = (
    "llava",
    "paligemma",
    "qwen2_vl",
    "qwen2_audio",
    "gemma3_896_snapshot",
    "idefics3_364_snapshot",
)
MODEL_PROBES = 4


def _median(times: list[float]) -> float:
    return statistics.median(times)


def bench_analysis(model_type: str, repeats: int = 5) -> tuple[float, float]:
    """(cold, warm) seconds of ``analyze`` once the snapshot's processor is loaded."""
    from mmport.analyzers import analyze
    from mmport.analyzers.sourcefile import parse_class
    from mmport.sources import resolve

    snapshot = resolve(model_type)
    snapshot.load_processor(), snapshot.load_config()
    cold = []
    for _ in range(repeats):
        parse_class.cache_clear()
        started = time.perf_counter()
        analyze(snapshot)
        cold.append(time.perf_counter() - started)
    started = time.perf_counter()
    analyze(snapshot)
    return _median(cold), time.perf_counter() - started


def bench_render(model_type: str, repeats: int = 5) -> float:
    """Seconds to render ``model_type``'s port files, ruff's formatting included (median)."""
    from mmport.analyzers import analyze
    from mmport.render import render_port
    from mmport.sources import resolve

    spec = analyze(resolve(model_type))
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        render_port(spec)
        times.append(time.perf_counter() - started)
    return _median(times)


@contextlib.contextmanager
def _timed(cls: type, *names: str) -> Iterator[dict]:
    """Accumulate the seconds and calls spent in methods ``names`` of ``cls``."""
    spent = {"seconds": 0.0, "calls": 0}
    originals = {name: getattr(cls, name) for name in names}

    def timed(method):
        def run(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                spent["seconds"] += time.perf_counter() - started
                spent["calls"] += 1

        return run

    for name, method in originals.items():
        setattr(cls, name, timed(method))
    try:
        yield spent
    finally:
        for name, method in originals.items():
            setattr(cls, name, method)


def bench_verify(
    model_type: str, port_dir: Path, repeats: int = 3
) -> tuple[float, float, int]:
    """(total seconds, seconds inside HF processor calls, HF calls) of one verify; medians of ``repeats``.

    The first run is a warm-up (imports, parse caches), as in a process that
    verifies many ports.
    """
    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.sources import resolve
    from mmport.verify import verify_port

    snapshot = resolve(model_type)
    write_files(render_port(analyze(snapshot)), port_dir, force=True)
    port = next(port_dir.glob("*_processing.py"))
    verify_port(model_type, port, probes=8, seed=0)
    runs = []
    for _ in range(repeats):
        with _timed(type(snapshot.load_processor()), "__call__") as spent:
            report = verify_port(model_type, port, probes=8, seed=0)
        assert report.passed, report.failure_summary()
        runs.append((report.seconds, spent["seconds"], spent["calls"]))
    return _median([r[0] for r in runs]), _median([r[1] for r in runs]), runs[0][2]


def bench_lanes() -> list[tuple[str, float, str]]:
    """Wall time of each pytest lane in a fresh clone of HEAD, with an empty snapshot cache."""
    import os
    import tempfile

    lanes = [
        ("fast lane (the README's test command)", []),
        ("slow stage", ["-m", "slow and not vllm"]),
    ]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "mmport"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        env = {
            **os.environ,
            "PYTHONPATH": str(clone),
            "MMPORT_CACHE": str(Path(tmp) / "cache"),
        }
        for name, args in lanes:
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
            )
            summary = (done.stdout.strip().splitlines() or ["no output"])[-1].strip(
                "= "
            )
            results.append((name, time.perf_counter() - started, summary))
    return results


def _coverage_line() -> str:
    """The coverage benchmark's own figure, as benchmarks/family_coverage.py wrote it."""
    coverage = ROOT / "docs" / "coverage.md"
    found = (
        re.search(
            r"; ([\d.]+) min on (\d+) cores with (\d+) workers", coverage.read_text()
        )
        if coverage.exists()
        else None
    )
    if not found:
        return "- coverage: not measured yet (`python benchmarks/family_coverage.py --write`)"
    minutes, cores, workers = found.groups()
    return f"- `benchmarks/family_coverage.py` (every family, one pass): {minutes} min on {cores} cores with {workers} workers (docs/coverage.md)."


def _model_ref(name: str, tmp: Path) -> str:
    """A model_type, or a real-geometry snapshot built by tests/snapshots.py."""
    if not name.endswith("_snapshot"):
        return name
    sys.path.insert(0, str(ROOT / "tests"))
    import snapshots

    return str(getattr(snapshots, name)(tmp / name))


def bench_model(name: str, tmp: Path, device: str) -> dict:
    """One ``verify --model --tiny`` run: total time, time in the HF model, max diffs."""
    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.runtime import hf_model
    from mmport.sources import resolve
    from mmport.verify import ModelOptions, verify_port

    ref = _model_ref(name, tmp)
    port_dir = tmp / f"port-{name}"
    write_files(render_port(analyze(resolve(ref))), port_dir, force=True)
    port = next(port_dir.glob("*_processing.py"))
    plain = verify_port(ref, port, probes=MODEL_PROBES, seed=0)
    with _timed(hf_model.HFModel, "features", "logits") as spent:
        report = verify_port(
            ref,
            port,
            probes=MODEL_PROBES,
            seed=0,
            model=ModelOptions(device=device, tiny=True),
        )
    check = report.checks["model"]
    assert report.passed, report.failure_summary()
    return {
        "ref": name,
        "plain": plain.seconds,
        "total": report.seconds,
        "in_model": spent["seconds"],
        "params": check.metrics["parameters"],
        "logits": check.metrics["max_logit_diff"],
        "features": check.metrics["max_feature_diff"],
        "summary": check.summary,
    }


# The sections of docs/performance.md this script writes (beside the part above them).
OWN_SECTIONS = ("## Test lanes", "## `verify --model")


def model_lines(device: str) -> list[str]:
    """The verify --model table."""
    import tempfile

    lines = [
        f"## `verify --model --tiny` ({MODEL_PROBES} probes, device `{device}`)",
        "",
        "| snapshot | tiny twin params | verify without --model (s) | with --model (s) | in the HF model (s) | max abs logits diff | max abs features diff |",
        "|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODEL_REFS:
            r = bench_model(name, Path(tmp), device)
            lines.append(
                f"| {r['ref']} | {r['params'] / 1e6:.1f}M | {r['plain']:.1f} | {r['total']:.1f} | {r['in_model']:.1f} "
                f"| {r['logits']:.3g} | {r['features']:.3g} |"
            )
    lines += [
        "",
        "Each probe runs the HF encoder twice per item (on the port's kwargs and on",
        "HF's own one-item kwargs) and the full model twice (on HF's outputs and on",
        "the port's ids and re-batched kwargs); logits are projected only at text",
        "positions. The rest of the added time is building the tiny twin and the HF",
        "processor calls for each item alone.",
        "",
    ]
    return lines


def main() -> None:
    """Run every benchmark; optionally write docs/performance.md."""
    import tempfile

    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", action="store_true", help="rewrite docs/performance.md"
    )
    parser.add_argument(
        "--model-device",
        default="cpu",
        help="device for the verify --model table (cpu, cuda)",
    )
    parser.add_argument(
        "--model-only",
        action="store_true",
        help="only the verify --model table (a device run)",
    )
    parser.add_argument(
        "--lanes",
        action="store_true",
        help="also time the test lanes in a fresh clone (minutes)",
    )
    args = parser.parse_args()
    if args.model_only:
        print("\n".join(model_lines(args.model_device)))
        return
    lines = [
        "# Performance",
        "",
        f"Measured by `python benchmarks/bench.py --write` on {platform.machine()}, "
        f"Python {platform.python_version()}, transformers {transformers.__version__}, "
        f"{__import__('os').cpu_count()} cores. Medians; synthetic snapshots already built.",
        "",
        "- `mmport --help`: see *Start-up* below (`python benchmarks/startup.py --write`).",
        _coverage_line(),
        "",
        "| model | analyze, cold (s) | analyze, warm (s) | render + format (s) | verify 8 probes (s) | in HF processor calls (s) | HF calls | verify's own time / HF's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in MODELS:
            cold, warm = bench_analysis(model_type)
            render = bench_render(model_type)
            total, in_hf, calls = bench_verify(model_type, Path(tmp) / model_type)
            ratio = (total - in_hf) / in_hf
            lines.append(
                f"| {model_type} | {cold:.3f} | {warm:.3f} | {render:.2f} | {total:.2f} | {in_hf:.2f} | {calls} | {ratio:.2f}× |"
            )
    lines += [
        "",
        "*Render + format* renders the three port files and formats each with ruff",
        "(one `ruff format` process per file).",
        "*Cold* analysis parses the HF classes it reads (libcst with positions);",
        "*warm* reuses the parse cache. Loading transformers and building the HF",
        "processor (a few seconds, once per process) is not part of analysis.",
        "*verify's own time* is everything outside the HF processor's `__call__`",
        "(the reference's calls and those the port makes through vLLM's hooks):",
        "loading the reference processor and the port's own processor and tokenizer",
        "(as vLLM does, independently of the reference's), probe images, the",
        "prompt-update engine, the checks and the port's code. Medians of 3 runs",
        "after a warm-up run.",
        "",
    ]
    if args.lanes:
        lines += [
            "## Test lanes (fresh clone of HEAD, empty snapshot cache)",
            "",
            "| lane | wall time (s) | pytest summary |",
            "|---|---|---|",
            *[
                f"| {name} | {seconds:.0f} | {summary} |"
                for name, seconds, summary in bench_lanes()
            ],
            "",
            "The vLLM stages of `.ci/run` run in their own environments; `.ci/run`",
            "prints each stage's wall time.",
            "",
        ]
    lines += [
        *model_lines(args.model_device),
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        # The sections other benchmarks (startup.py, serve.py) or people wrote stay.
        kept = others(DOC.read_text() if DOC.exists() else "", OWN_SECTIONS)
        DOC.write_text(join(text, kept))


if __name__ == "__main__":
    main()
