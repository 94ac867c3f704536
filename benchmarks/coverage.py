"""Coverage benchmark: scaffold + verify every image family of the installed transformers.

    python benchmarks/coverage.py                 # all families, print the table
    python benchmarks/coverage.py --write         # also rewrite docs/coverage.md
    python benchmarks/coverage.py llava qwen2_vl  # only these

A family is every model_type whose processor expands image placeholders: it
(or a model-specific base) defines ``replace_image_token``, the 5.x hook, or
overrides ``__call__`` and handles an image token itself. Families run on
their synthetic snapshots in a small pool of worker processes (``--jobs``),
each importing torch and transformers once (benchmarks/pool.py); a family
that hangs past ``--time-limit`` or kills its worker is reported as such,
and its worker replaced.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pool import WorkerFailure, WorkerPool, serve

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 300


@dataclass
class Outcome:
    """One family's result: the stage reached and why it stopped."""

    model_type: str
    verdict: str  # pass, fail (a check failed), error (a stage raised)
    stage: str  # resolve, analyze, render, verify
    strategy: str = ""
    detail: str = ""
    seconds: float = 0.0


def image_families() -> list[str]:
    """model_types whose processor expands image placeholders."""
    import inspect

    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES, processor_class_from_name

    families = []
    for model_type, name in sorted(PROCESSOR_MAPPING_NAMES.items()):
        try:
            cls = processor_class_from_name(name)
            if "image_processor" not in cls.get_attributes():
                continue
        except Exception:  # needs a backend this machine lacks (sentencepiece, ...)
            continue
        own = [k for k in cls.__mro__ if k.__module__.startswith("transformers.models")]
        if any("replace_image_token" in vars(k) for k in own):
            families.append(model_type)
        elif any("__call__" in vars(k) for k in own) and "image_token" in inspect.getsource(inspect.getmodule(cls)):
            families.append(model_type)
    return families


def run_one(model_type: str, probes: int) -> Outcome:
    """Resolve, analyse, render and verify one family (in this process)."""
    from mmport.errors import one_line

    started = time.perf_counter()
    stage = "resolve"
    try:
        from mmport.sources import resolve

        snapshot = resolve(model_type)
        snapshot.load_processor()
        stage = "analyze"
        from mmport.analyzers import analyze

        spec = analyze(snapshot)
        strategy = spec.modalities[0].count.strategy
        stage = "render"
        from mmport.render import render_port, write_files

        with tempfile.TemporaryDirectory() as tmp:
            write_files(render_port(spec), Path(tmp))
            stage = "verify"
            from mmport.verify import verify_port

            report = verify_port(model_type, Path(tmp) / f"{spec.module_name}_processing.py", probes=probes, seed=0)
    except Exception as exc:
        return Outcome(model_type, "error", stage, detail=one_line(exc)[:160], seconds=time.perf_counter() - started)
    failed = [c for c in report.checks.values() if c.status == "fail"]
    detail = f"{failed[0].name}: {failed[0].failures[0].describe()}"[:160] if failed else ""
    verdict = "fail" if failed else "pass"
    return Outcome(model_type, verdict, stage, strategy, detail, time.perf_counter() - started)


def _warm_up() -> None:
    """What every family needs, imported once per worker."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import mmport.analyzers  # noqa: F401
    import mmport.render  # noqa: F401
    import mmport.verify  # noqa: F401


def _outcome(model_type: str, answer: dict | WorkerFailure) -> Outcome:
    if isinstance(answer, WorkerFailure):
        return Outcome(model_type, "error", answer.kind, detail=answer.detail[:160], seconds=answer.seconds)
    return Outcome(**answer)


def run_all(families: list[str], probes: int, jobs: int, time_limit: float) -> list[Outcome]:
    """Every family through the worker pool, with a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    command = [sys.executable, __file__, "--worker", "--probes", str(probes)]
    pool = WorkerPool(command, jobs=jobs, time_limit=time_limit, cwd=str(ROOT))
    outcomes: dict[str, Outcome] = {}
    columns = (TextColumn("coverage"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("", total=len(families))
        for model_type, answer in pool.run(families):
            outcome = outcomes[model_type] = _outcome(model_type, answer)
            progress.update(task, advance=1, description=f"{model_type}: {outcome.verdict}")
    return [outcomes[f] for f in families]


def render_markdown(outcomes: list[Outcome], transformers_version: str, seconds: float, jobs: int) -> str:
    """docs/coverage.md: summary figures and one row per family."""
    passed = [o for o in outcomes if o.verdict == "pass"]
    derived = [o for o in passed if o.strategy == "derived"]
    share = len(derived) / len(passed) if passed else 0.0
    lines = [
        "# Coverage: scaffold + verify on every image family",
        "",
        "Generated by `python benchmarks/coverage.py --write` — do not edit by hand.",
        "",
        f"transformers {transformers_version}; {len(outcomes)} families whose processor expands image "
        f"placeholders; synthetic snapshots; 4 probes each; {seconds / 60:.1f} min on {os.cpu_count()} cores "
        f"with {jobs} workers (each imports torch and transformers once; a family's time excludes that).",
        "",
        f"- **pass: {len(passed)} / {len(outcomes)} ({len(passed) / max(len(outcomes), 1):.0%})**",
        f"- derived (not delegated) count among passing: {len(derived)} / {len(passed)} ({share:.0%})",
        "",
        "| model_type | verdict | stage | strategy | time (s) | first failure or error |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        detail = o.detail.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {o.model_type} | {o.verdict} | {o.stage} | {o.strategy} | {o.seconds:.1f} | {detail} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the benchmark (or one family, with ``--one``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="model_types to run (default: all image families)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probes", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, help="seconds one family may take")
    parser.add_argument("--write", action="store_true", help="rewrite docs/coverage.md")
    args = parser.parse_args()
    if args.worker:
        serve(lambda model_type: asdict(run_one(model_type, args.probes)), _warm_up)
        return
    import transformers

    families = args.families or image_families()
    started = time.perf_counter()
    outcomes = run_all(families, args.probes, args.jobs, args.time_limit)
    for o in outcomes:
        print(f"{o.model_type:28} {o.verdict:6} {o.stage:8} {o.strategy:9} {o.seconds:6.1f}s  {o.detail}")
    text = render_markdown(outcomes, transformers.__version__, time.perf_counter() - started, args.jobs)
    if args.write:
        (ROOT / "docs" / "coverage.md").write_text(text)
    print(text.split("| model_type")[0])


if __name__ == "__main__":
    main()
