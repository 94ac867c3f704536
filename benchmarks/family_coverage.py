"""Coverage benchmark: scaffold + verify every image, video and audio family of the installed transformers.

    python benchmarks/family_coverage.py                 # all families, print the table
    python benchmarks/family_coverage.py --write         # also rewrite docs/coverage.md
    python benchmarks/family_coverage.py llava qwen2_vl  # only these

A family is every model_type whose processor expands image, video or audio
placeholders: it (or a model-specific base) defines ``replace_<modality>_token``,
the 5.x hook, or overrides ``__call__`` and handles the modality's token itself.
A family passes only when every modality it handles passes. Families run on
their synthetic snapshots in a small pool of worker processes (``--jobs``),
each importing torch and transformers once (mmport.pool); a family
that hangs past ``--time-limit`` or kills its worker is reported as such,
and its worker replaced. Where the serve environment exists, every passing
family's generated model class is then built under a real ``VllmConfig``
(mmport.serve.construct, one process for all): the "model class" column.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mmport.pool import WorkerFailure, WorkerPool, add_pool_arguments, serve

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 300

# Request settings drawn per modality (verify's own default is 3): one keeps the
# pass over every family inside its 10-minute budget on 2 cores.
COVERAGE_SETTINGS = 1


MODALITIES = ("image", "video", "audio")


@dataclass
class Outcome:
    """One family's result: the stage reached and why it stopped, per modality what happened."""

    model_type: str
    verdict: str  # pass, fail (a check failed), error (a stage raised)
    stage: str  # resolve, analyze, render, verify
    strategy: str = ""  # the image side's count strategy (or the first modality's)
    detail: str = ""
    seconds: float = 0.0
    modalities: dict[str, str] | None = (
        None  # modality -> "pass derived", "fail delegated", ...
    )
    model_class: str = ""  # "constructs", "fails: ...", or "" (not built)
    # Which of the class's modules are vLLM's and which HF's (see _modules_cell).
    modules: str = ""
    # vLLM's lint findings left in the generated files (mmport.render.lint), each "file:line: CODE msg".
    lint: tuple[str, ...] = ()


def _sub_processor_attributes(modality: str) -> tuple[str, ...]:
    return {
        "image": ("image_processor",),
        "video": ("video_processor",),
        "audio": ("feature_extractor", "audio_processor"),
    }[modality]


def _expands(cls: type, modality: str) -> bool:
    """Does processor class ``cls`` expand ``modality`` placeholders (hook, or its own ``__call__``)?"""
    import inspect
    import re

    if not set(_sub_processor_attributes(modality)) & set(cls.get_attributes()):
        return False
    own = [k for k in cls.__mro__ if k.__module__.startswith("transformers.models")]
    if any(f"replace_{modality}_token" in vars(k) for k in own):
        return True
    token = re.compile(rf"\b{modality}_token\b")
    return any("__call__" in vars(k) for k in own) and bool(
        token.search(inspect.getsource(inspect.getmodule(cls)))
    )


def families() -> dict[str, list[str]]:
    """model_type -> the modalities its processor expands placeholders for."""
    from transformers.models.auto.processing_auto import (
        PROCESSOR_MAPPING_NAMES,
        processor_class_from_name,
    )

    found = {}
    for model_type, name in sorted(PROCESSOR_MAPPING_NAMES.items()):
        try:
            cls = processor_class_from_name(name)
            cls.get_attributes()
        except Exception:  # needs a backend this machine lacks (sentencepiece, ...)
            continue
        modalities = [m for m in MODALITIES if _expands(cls, m)]
        if modalities:
            found[model_type] = modalities
    return found


def run_one(
    model_type: str,
    probes: int,
    expected: list[str] | None = None,
    keep: Path | None = None,
) -> Outcome:
    """Resolve, analyse, render and verify one family (in this process).

    ``expected`` are the modalities the family's processor expands; one the
    port does not cover counts as failed. With ``keep`` the port is rendered
    into ``keep/<model_type>`` and left there (for the model class column).
    """
    from mmport.errors import one_line

    started = time.perf_counter()
    stage = "resolve"
    expected = expected or ["image"]
    try:
        from mmport.sources import resolve

        snapshot = resolve(model_type)
        snapshot.load_processor()
        stage = "analyze"
        from mmport.analyzers import analyze

        spec = analyze(snapshot)
        strategies = {m.modality: m.count.strategy for m in spec.modalities}
        stage = "render"
        from mmport.render import render_port, write_files

        with tempfile.TemporaryDirectory() as tmp:
            port_dir = keep / model_type if keep else Path(tmp)
            files = render_port(spec)
            lint = tuple(finding for f in files for finding in f.findings)
            write_files(files, port_dir, force=True)
            stage = "verify"
            from mmport.verify import verify_port

            port = port_dir / f"{spec.module_name}_processing.py"
            report = verify_port(
                model_type,
                port,
                probes=probes,
                seed=0,
                settings_per_modality=COVERAGE_SETTINGS,
            )
    except Exception as exc:
        errored = dict.fromkeys(expected, "error")
        return Outcome(
            model_type,
            "error",
            stage,
            detail=one_line(exc)[:160],
            seconds=time.perf_counter() - started,
            modalities=errored,
        )
    failed_checks = [c for c in report.checks.values() if c.status == "fail"]
    failed = report.failed_modalities() if failed_checks else set()
    # A side HF itself refuses is not ported (the spec notes why): it fails, named as such.
    unported = {
        m: "refused by HF"
        if any(n.startswith(f"{m} not ported") for n in spec.notes)
        else "missing"
        for m in expected
    }
    modalities = {
        m: f"{'fail' if m in failed or m not in strategies else 'pass'} {strategies.get(m, unported[m])}"
        for m in expected
    }
    detail = (
        f"{failed_checks[0].name}: {failed_checks[0].failures[0].describe()}"[:160]
        if failed_checks
        else ""
    )
    if not detail and any(m not in strategies for m in expected):
        detail = next(
            (n for n in spec.notes if "not ported" in n),
            "a modality HF handles is not in the port",
        )[:160]
    verdict = (
        "fail"
        if failed_checks or any(v.startswith("fail") for v in modalities.values())
        else "pass"
    )
    strategy = next(iter(strategies.values()), "")
    return Outcome(
        model_type,
        verdict,
        stage,
        strategy,
        detail,
        time.perf_counter() - started,
        modalities,
        lint=lint,
        modules=_modules_cell(spec),
    )


def _modules_cell(spec) -> str:
    """Which modules the generated class builds as vLLM's and which as HF's: the whole
    class as vLLM code (mmport.analyzers.vllmclass), or HF's feature paths on the modules."""
    plan = spec.vllm_model
    if plan is not None:
        towers = ", ".join(
            f"{t.owner} {t.class_name}"
            + (" kept: mmport maps it to no vLLM module" if t.kept else "")
            for t in plan.towers
        )
        parts = [f"vLLM code: {towers}"]
        for p in plan.projectors:
            how = "on vLLM's layers" if not p.copied else "HF's code copied"
            parts.append(f"{p.attr} {how}")
        copied = [p.method for p in plan.paths if p.copied]
        if copied:
            around = (
                "on HF's tower"
                if any(t.kept for t in plan.towers)
                else "around vLLM's tower"
            )
            parts.append(f"HF's {', '.join(copied)} copied {around}")
        if plan.rope:
            parts.append("HF's get_rope_index copied")
        return "; ".join(parts)
    if spec.encoder is None:
        return "no encoder"
    built = [
        f"vLLM's {m.native.encoder.name}" if m.native else f"HF's {m.attr}"
        for m in spec.encoder.modules
    ]
    return f"HF's paths on {', '.join(built)} ({spec.vllm_model_reason[:80]})"


def _warm_up() -> None:
    """What every family needs, imported once per worker."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import mmport.analyzers
    import mmport.render
    import mmport.verify  # noqa: F401


def _outcome(
    model_type: str, expected: list[str], answer: dict | WorkerFailure
) -> Outcome:
    if isinstance(answer, WorkerFailure):
        errored = dict.fromkeys(expected, "error")
        return Outcome(
            model_type,
            "error",
            answer.kind,
            detail=answer.detail[:160],
            seconds=answer.seconds,
            modalities=errored,
        )
    return Outcome(**answer)


def construct_classes(outcomes: list[Outcome], keep: Path) -> None:
    """Build every passing family's generated model class in vLLM; fill ``model_class``."""
    from mmport.analyzers import analyze
    from mmport.errors import one_line
    from mmport.serve.construct import (
        ConstructJob,
        construct_ports,
        language_control_dir,
        twin_config_dir,
    )
    from mmport.sources import resolve

    jobs = []
    for o in outcomes:
        if o.verdict != "pass":
            continue
        try:
            snapshot = resolve(o.model_type)
            spec = analyze(snapshot)
            config_dir = twin_config_dir(snapshot, keep / f"{o.model_type}.config")
            language = language_control_dir(
                snapshot.load_config(), spec.language, keep / f"{o.model_type}.text"
            )
        except Exception as exc:  # the twin config could not be written
            o.model_class = f"fails: {one_line(exc)[:120]}"
            continue
        if not spec.language.has_text_model:
            # A vision encoder on its own: vLLM serves it inside another family's port.
            o.model_class = "not judged: HF's model has no text model to generate with"
            continue
        jobs.append(
            ConstructJob(
                o.model_type,
                keep / o.model_type,
                spec.module_name,
                spec.architecture,
                config_dir,
                language,
            )
        )
    print(f"building {len(jobs)} model classes in vLLM", file=sys.stderr)
    built = construct_ports(jobs, timeout_s=60 * 60)
    for o in outcomes:
        if o.model_type in built:
            got = built[o.model_type]
            if got.environment:
                # One line: a table row (pydantic's errors span several).
                o.model_class = f"not judged: {' '.join(got.environment.split())[:120]}"
            elif got.ok:
                newer = f" (with transformers {got.transformers})"
                o.model_class = "constructs" + (newer if got.transformers else "")
            else:
                error = " ".join(got.error.split())
                o.model_class = f"{_failure_kind(error)}: {error[:120]}" + (
                    f" ({got.port_frame[:80]})" if got.port_frame else ""
                )


def _failure_kind(error: str) -> str:
    """``refuses`` for the generated class's own NotImplementedError, ``fails`` for any other error."""
    return "refuses" if error.startswith("NotImplementedError: mmport") else "fails"


def run_all(
    chosen: dict[str, list[str]],
    probes: int,
    jobs: int,
    time_limit: float,
    keep: Path | None = None,
) -> list[Outcome]:
    """Every family (model_type -> its modalities) through the worker pool, with a progress bar on stderr."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    command = [sys.executable, __file__, "--worker", "--probes", str(probes)]
    if keep:
        command += ["--keep", str(keep)]
    pool = WorkerPool(command, jobs=jobs, time_limit=time_limit, cwd=str(ROOT))
    outcomes: dict[str, Outcome] = {}
    columns = (
        TextColumn("coverage"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("", total=len(chosen))
        for (model_type, expected), answer in pool.run(
            [[name, modalities] for name, modalities in chosen.items()]
        ):
            outcome = outcomes[model_type] = _outcome(model_type, expected, answer)
            progress.update(
                task, advance=1, description=f"{model_type}: {outcome.verdict}"
            )
    return [outcomes[name] for name in chosen]


def _modality_lines(outcomes: list[Outcome]) -> list[str]:
    """Per modality: families, passing, and derived among the passing."""
    lines = []
    for modality in MODALITIES:
        cells = [
            o.modalities[modality]
            for o in outcomes
            if o.modalities and modality in o.modalities
        ]
        if not cells:
            continue
        passed = [c for c in cells if c.startswith("pass")]
        derived = [c for c in passed if c.endswith("derived")]
        lines.append(
            f"- {modality}: **{len(passed)} / {len(cells)} pass ({len(passed) / len(cells):.0%})**, "
            f"derived among passing {len(derived)} / {len(passed)} ({len(derived) / max(len(passed), 1):.0%})"
        )
    return lines


def _model_class_line(outcomes: list[Outcome], seconds: float | None) -> list[str]:
    """How many passing families' model classes vLLM builds (when they were built)."""
    if seconds is None:
        return ["- model class: not built (no serve environment, or `--no-construct`)"]
    built = [o for o in outcomes if o.model_class]
    ok = [o for o in built if o.model_class.startswith("constructs")]
    newer = [o for o in ok if o.model_class != "constructs"]
    judged = [o for o in built if not o.model_class.startswith("not judged")]
    refused = [o for o in judged if o.model_class.startswith("refuses")]
    return [
        f"- **model class constructs in vLLM: {len(ok)} / {len(judged)} passing families judged** "
        f"(built under a real `VllmConfig` from a tiny twin config, in vLLM's CPU build, "
        f"{seconds:.0f} s for all, in one process until a class ends it; mmport.serve.construct); "
        f"{len(newer)} of them with the transformers the port was generated under, where the "
        "CPU build's own is too old to have the family; "
        f"{len(refused)} of the others refuse by design: their class raises a "
        "`NotImplementedError` naming why vLLM has no language model to build for them; "
        f"{len(built) - len(judged)} not judged there, where that environment cannot build the "
        "family at all: vLLM refuses the config, HF's own model cannot be built from the snapshot's config "
        "either, vLLM's own class fails on the same twin too, or the text architecture the class "
        "has vLLM build fails alone, with the same kind of error, on a tiny config of its own family "
        "(a kernel vLLM's CPU build lacks); or where HF's model has no text model (a vision encoder alone)"
    ]


def _lint_line(passed: list[Outcome]) -> list[str]:
    """How many passing families' generated files vLLM's ruff rules find nothing in."""
    clean = [o for o in passed if not o.lint]
    findings = sum(len(o.lint) for o in passed)
    return [
        f"- **clean by vLLM's lint: {len(clean)} / {len(passed)} passing families** "
        f"(ruff with vLLM's rule selection at line length 88, after its safe fixes; "
        f"{findings} findings left in all; mmport.render.lint)"
    ]


def _modules_line(passed: list[Outcome]) -> list[str]:
    """How many passing families' classes are written as vLLM code."""
    native = [o for o in passed if o.modules.startswith("vLLM code")]
    return [
        f"- **model class written as vLLM code: {len(native)} / {len(passed)} passing families** "
        "(vLLM's tower through its own API, projectors on vLLM's layers, weights by prefix alone; "
        "the others run HF's feature paths on the modules named, and say why; mmport.analyzers.vllmclass)"
    ]


def _lint_cell(o: Outcome) -> str:
    """The family's lint findings: none, or how many and the first (its rule and message)."""
    if o.stage in ("resolve", "analyze", "render"):
        return ""
    if not o.lint:
        return "clean"
    first = o.lint[0].split(": ", 1)[-1].replace("|", "\\|")
    return f"{len(o.lint)}: {first[:60]}"


def render_markdown(
    outcomes: list[Outcome],
    transformers_version: str,
    seconds: float,
    jobs: int,
    build_seconds: float | None = None,
) -> str:
    """docs/coverage.md: summary figures and one row per family."""
    passed = [o for o in outcomes if o.verdict == "pass"]
    lines = [
        "# Coverage: scaffold + verify on every image, video and audio family",
        "",
        "Generated by `python benchmarks/family_coverage.py --write` — do not edit by hand.",
        "",
        f"transformers {transformers_version}; {len(outcomes)} families whose processor expands image, video or audio "
        f"placeholders; synthetic snapshots; 4 probes each, and 3 more under each of up to {COVERAGE_SETTINGS} drawn request setting(s) per modality; {seconds / 60:.1f} min on {os.cpu_count()} cores "
        f"with {jobs} workers (each imports torch and transformers once; a family's time excludes that).",
        "A family passes only when every modality its processor handles passes.",
        "",
        f"- **families passing: {len(passed)} / {len(outcomes)} ({len(passed) / max(len(outcomes), 1):.0%})**",
        *_modality_lines(outcomes),
        *_model_class_line(outcomes, build_seconds),
        *_lint_line(passed),
        *_modules_line(passed),
        "",
        "| model_type | verdict | stage | image | video | audio | model class | modules | vLLM lint | time (s) | first failure or error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        detail = o.detail.replace("|", "\\|").replace("\n", " ")
        model_class = o.model_class.replace("|", "\\|")
        modules = o.modules.replace("|", "\\|")
        cells = [(o.modalities or {}).get(m, "") for m in MODALITIES]
        lines.append(
            f"| {o.model_type} | {o.verdict} | {o.stage} | {' | '.join(cells)} | {model_class} | {modules} | {_lint_cell(o)} | {o.seconds:.1f} | {detail} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the benchmark (or one family, with ``--one``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pool_arguments(parser, "run", TIME_LIMIT_S)
    parser.add_argument("--probes", type=int, default=4)
    parser.add_argument("--write", action="store_true", help="rewrite docs/coverage.md")
    parser.add_argument(
        "--no-construct",
        action="store_true",
        help="skip building the model classes in vLLM's serve environment",
    )
    parser.add_argument("--keep", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve(
            lambda job: asdict(run_one(job[0], args.probes, job[1], args.keep)),
            _warm_up,
        )
        return
    import transformers

    from mmport.serve import serve_python

    construct = not args.no_construct and serve_python() is not None

    found = families()
    chosen = (
        {name: found.get(name, ["image"]) for name in args.families}
        if args.families
        else found
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mmport-coverage-") as tmp:
        keep = Path(tmp) if construct else None
        outcomes = run_all(chosen, args.probes, args.jobs, args.time_limit, keep)
        build_started = time.perf_counter()
        if keep:
            construct_classes(outcomes, keep)
        build_seconds = time.perf_counter() - build_started if keep else None
    for o in outcomes:
        cells = " ".join(f"{m}={v}" for m, v in (o.modalities or {}).items())
        print(
            f"{o.model_type:28} {o.verdict:6} {o.stage:8} {cells:50} {o.seconds:6.1f}s  {o.model_class or '-':12} {o.detail}"
        )
    text = render_markdown(
        outcomes,
        transformers.__version__,
        time.perf_counter() - started,
        args.jobs,
        build_seconds,
    )
    if args.write:
        (ROOT / "docs" / "coverage.md").write_text(text)
    print(text.split("| model_type")[0])


if __name__ == "__main__":
    main()
