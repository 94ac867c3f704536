"""Audit vLLM's own ports: each family vLLM registers, verified against HF beside mmport's generated port.

    python benchmarks/audit.py                  # every family, print the table
    python benchmarks/audit.py --write          # also rewrite docs/audit.md
    python benchmarks/audit.py llava qwen2_vl   # only these

Run it inside a vLLM 0.33 environment (docs/vllm.md), e.g.
``PYTHONPATH=. /opt/mmport-vllm-venv/bin/python benchmarks/audit.py --write``.
The families are those of the installed transformers whose processor expands
image, video or audio placeholders (as benchmarks/family_coverage.py finds them) and
whose synthetic snapshot names an architecture vLLM registers. Each runs
twice on the same seeded probes: ``mmport verify MT --port vllm`` (the
processor vLLM registers) and mmport's generated port, both inside the real
vLLM. Families run in a pool of worker processes (benchmarks/pool.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pool import WorkerFailure, WorkerPool, add_pool_arguments, serve

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 400
PROBES = 8
SETTINGS = 1  # drawn request settings per modality (verify's own default is 3)


@dataclass
class Verdict:
    """One port's result on a family: pass, fail (a check failed), cannot judge (nothing failed, but the
    synthetic snapshot lacks what a probe needs) or error (it did not run), and why."""

    verdict: str  # "pass", "fail", "cannot judge" or "error"
    checks: list[str] = field(
        default_factory=list
    )  # the failing checks (or, for cannot judge, those that cannot)
    detail: str = ""
    seconds: float = 0.0
    reproducer: str = (
        ""  # for a fail: the markdown of docs/findings/audit/<model_type>.md
    )
    # For a fail: the same port on the family's published-checkpoint geometry
    # (tests/snapshots.py CHECKPOINT_GEOMETRY), "" where the audit has none.
    confirmation: str = ""


@dataclass
class Audit:
    """One family: the architecture vLLM resolves, and both ports' verdicts."""

    model_type: str
    architecture: str
    vllm: Verdict | None = None
    mmport: Verdict | None = None
    note: str = ""  # why the family was not audited

    def command(self) -> str:
        """The command that reproduces vLLM's port's verdict."""
        return f"mmport verify {self.model_type} --port vllm --settings {SETTINGS}"


def _verify(model_type: str, port: Path | str) -> Verdict:
    from mmport.errors import one_line
    from mmport.verify import verify_port

    started = time.perf_counter()
    try:
        report = verify_port(
            model_type,
            Path(port),
            probes=PROBES,
            seed=0,
            backend="vllm",
            settings_per_modality=SETTINGS,
        )
    except Exception as exc:
        return Verdict(
            "error", detail=one_line(exc)[:300], seconds=time.perf_counter() - started
        )
    return _verdict_of(report, time.perf_counter() - started)


def _verdict_of(report, seconds: float) -> Verdict:
    """A report's verdict, its failing (or unjudged) checks and the first reason, as the audit's row says them."""
    if report.verdict == "pass":
        return Verdict("pass", seconds=seconds)
    # A check's status is the report's verdict on the checks that decided it.
    named = [c for c in report.checks.values() if c.status == report.verdict]
    first = named[0].detail()
    reproducer = reproducer_of(report, named[0]) if report.verdict == "fail" else ""
    return Verdict(
        report.verdict.replace("_", " "),
        [c.name for c in named],
        f"{named[0].name}: {first}"[:300],
        seconds,
        reproducer,
    )


# Names of the snapshot's values that decide an item's count: the geometry a reproducer states.
GEOMETRY_WORDS = (
    "size",
    "pixels",
    "patch",
    "crop",
    "tile",
    "split",
    "pinpoints",
    "seq_length",
    "merge",
    "tokens",
    "frames",
    "fps",
)


def snapshot_geometry(model_type: str) -> dict[str, object]:
    """The snapshot's count-deciding values: vision sub-config sizes and the processors' settings named by GEOMETRY_WORDS."""
    from mmport.sources import resolve

    snapshot = resolve(model_type)
    geometry: dict[str, object] = {}
    config = snapshot.load_config().to_dict()
    for section, values in config.items():
        if (
            isinstance(values, dict)
            and section.endswith("_config")
            and section != "text_config"
        ):
            geometry |= {
                f"{section}.{k}": v
                for k, v in values.items()
                if k in ("image_size", "patch_size", "spatial_merge_size")
            }
    processor = snapshot.load_processor()
    for key, value in vars(processor).items():
        if (
            any(word in key for word in GEOMETRY_WORDS)
            and isinstance(value, int | float | str)
            and not key.startswith("_")
        ):
            geometry[f"processor.{key}"] = value
    for part in ("image_processor", "video_processor", "feature_extractor"):
        sub = getattr(processor, part, None)
        for key, value in (sub.to_dict() if sub is not None else {}).items():
            if (
                any(word in key for word in GEOMETRY_WORDS)
                and value is not None
                and not key.startswith("_")
            ):
                geometry[f"{part}.{key}"] = value
    return geometry


def reproducer_of(report, check) -> str:
    """A finding a maintainer could file: the snapshot's geometry, the one probe, what differs, how bad, the command."""
    import json

    failure = check.failures[0]
    lines = [
        f"# {report.ref}: vLLM 0.33's port fails `{check.name}`",
        "",
        f"Written by `benchmarks/audit.py` from one run of `mmport verify {report.ref} --port vllm --settings {SETTINGS}` "
        "inside vLLM 0.33 (docs/vllm.md says how to build that environment); do not edit by hand.",
        "",
        f"- **What differs**: {failure.describe()}",
        f"- **How bad**: {failure.severity()} (loud: vLLM raises; silent: wrong ids, counts or embeddings)",
        f"- **The probe**: {report.probe_cases.get(failure.probe, failure.probe)}",
    ]
    window = report.token_windows.get(failure.probe)
    if window is not None:
        lines.append(
            f"- **Around the first difference** (from position {window.start}): HF {list(window.hf_tokens or window.hf)}, "
            f"vLLM {list(window.port_tokens or window.port)}"
        )
    others = [f.describe() for f in check.failures[1:4]]
    if others:
        lines += ["- **Also**: " + "; ".join(others)]
    lines += [
        "",
        "## The snapshot",
        "",
        f"The synthetic `{report.ref}` snapshot (transformers' default config and processors, a tokenizer of the family's kind); "
        "the values that decide an item's count:",
        "",
        "```json",
        json.dumps(snapshot_geometry(report.ref), indent=2, default=str),
        "```",
        "",
        "## Reproduce",
        "",
        "```bash",
        f"PYTHONPATH=. /opt/mmport-vllm-venv/bin/python -m mmport verify {report.ref} --port vllm --settings {SETTINGS} --seed 0",
        "```",
    ]
    return "\n".join(lines) + "\n"


def _checkpoint_geometry(model_type: str):
    """tests/snapshots.py's builder of the family's published-checkpoint geometry, or None."""
    sys.path.insert(0, str(ROOT / "tests"))
    import snapshots

    return snapshots.CHECKPOINT_GEOMETRY.get(model_type)


def confirm(model_type: str, verdict: Verdict) -> Verdict:
    """A failing vLLM port re-run on the family's published-checkpoint geometry, where the audit has it.

    The failure is *confirmed* when the same port fails one of the same
    checks there; else it is the synthetic snapshot's, and the row says so.
    """
    build = _checkpoint_geometry(model_type)
    if verdict.verdict != "fail" or build is None:
        return verdict
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = build(Path(tmp) / model_type)
        again = _verify(str(snapshot), "vllm")
    shared = [c for c in again.checks if c in verdict.checks]
    where = f"`tests/snapshots.py:{build.__name__}` ({(build.__doc__ or '').splitlines()[0].rstrip('.')})"
    if again.verdict == "fail" and shared:
        verdict.confirmation = (
            f"confirmed: fails {', '.join(shared)} on {where}: {again.detail}"
        )
    else:
        verdict.confirmation = f"not confirmed: {again.verdict} on {where}" + (
            f" ({again.detail})" if again.detail else ""
        )
    verdict.reproducer += (
        "\n## On the published checkpoints' geometry\n\n" + verdict.confirmation + "\n"
    )
    return verdict


def _registered_architecture(model_type: str) -> str | None:
    """The snapshot's first architecture that vLLM registers, or None."""
    from vllm import ModelRegistry

    from mmport.sources import resolve

    architectures = resolve(model_type).load_config().architectures or []
    supported = set(ModelRegistry.get_supported_archs())
    return next((arch for arch in architectures if arch in supported), None)


def _generated_port(model_type: str) -> Verdict:
    from mmport.analyzers import analyze
    from mmport.errors import one_line
    from mmport.render import render_port, write_files
    from mmport.sources import resolve

    try:
        spec = analyze(resolve(model_type))
        with tempfile.TemporaryDirectory() as tmp:
            write_files(render_port(spec), Path(tmp))
            return _verify(model_type, Path(tmp) / f"{spec.module_name}_processing.py")
    except Exception as exc:
        return Verdict("error", detail=f"scaffold: {one_line(exc)}"[:300])


def audit_one(model_type: str) -> Audit:
    """Verify vLLM's registered port and mmport's generated port of one family (in this process)."""
    from mmport.errors import one_line

    try:
        architecture = _registered_architecture(model_type)
    except Exception as exc:
        return Audit(
            model_type, "", note=f"no synthetic snapshot: {one_line(exc)}"[:200]
        )
    if architecture is None:
        return Audit(
            model_type,
            "",
            note="vLLM 0.33 registers none of the snapshot's architectures",
        )
    return Audit(
        model_type,
        architecture,
        confirm(model_type, _verify(model_type, "vllm")),
        _generated_port(model_type),
    )


def _warm_up() -> None:
    """What every family needs, imported once per worker."""
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import vllm.multimodal.processing  # noqa: F401

    import mmport.analyzers
    import mmport.verify  # noqa: F401


def _from_answer(model_type: str, answer: dict | WorkerFailure) -> Audit:
    if isinstance(answer, WorkerFailure):
        return Audit(
            model_type,
            "",
            note=f"the audit's worker {answer.kind}: {answer.detail}"[:200],
        )
    answer = dict(answer)
    for key in ("vllm", "mmport"):
        answer[key] = Verdict(**answer[key]) if answer[key] else None
    return Audit(**answer)


def run_all(model_types: list[str], jobs: int, time_limit: float) -> list[Audit]:
    """Every family through the worker pool, with a progress bar on stderr."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    pool = WorkerPool(
        [sys.executable, __file__, "--worker"],
        jobs=jobs,
        time_limit=time_limit,
        cwd=str(ROOT),
    )
    audits: dict[str, Audit] = {}
    columns = (
        TextColumn("audit"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns) as progress:
        task = progress.add_task("", total=len(model_types))
        for model_type, answer in pool.run(model_types):
            audit = audits[model_type] = _from_answer(model_type, answer)
            progress.update(
                task,
                advance=1,
                description=f"{model_type}: {audit.vllm.verdict if audit.vllm else 'not audited'}",
            )
    return [audits[name] for name in model_types]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(
    audits: list[Audit], versions: str, seconds: float, jobs: int
) -> str:
    """docs/audit.md: the figures, one row per audited family, and the families left out."""
    audited = [a for a in audits if a.vllm]
    tally = {
        v: sum(a.vllm.verdict == v for a in audited)
        for v in ("pass", "fail", "cannot judge", "error")
    }
    both = sum(a.mmport is not None and a.mmport.verdict == "pass" for a in audited)
    checked = [a for a in audited if a.vllm.confirmation]
    confirmed = [a for a in checked if a.vllm.confirmation.startswith("confirmed")]
    lines = [
        "# Audit: vLLM's own ports against the HF processors",
        "",
        "Generated by `PYTHONPATH=. /opt/mmport-vllm-venv/bin/python benchmarks/audit.py --write` — do not edit by hand;",
        'what the disagreements mean is in docs/vllm.md ("What the audit finds").',
        "",
        f"{versions}; synthetic snapshots of every family whose processor expands image, video or audio placeholders "
        f"and whose architecture vLLM registers; {PROBES} probes each and 3 more under each of {SETTINGS} drawn request "
        f"setting(s) per modality, seed 0, inside the real vLLM; {seconds / 60:.1f} min with {jobs} workers.",
        "Each row's command reproduces vLLM's verdict (inside that environment).",
        "",
        f"- **vLLM's port: {tally['pass']} pass, {tally['fail']} fail, {tally['cannot judge']} cannot judge, "
        f"{tally['error']} cannot run, of {len(audited)} families**",
        "- *cannot judge*: nothing failed, but the port (or HF) raised because the synthetic snapshot lacks what "
        "real checkpoints of the family carry (a vocabulary entry, a config attribute); see docs/vllm.md",
        f"- mmport's generated port passes the same probes on {both} of them",
        f"- failures re-run on the family's published-checkpoint geometry (tests/snapshots.py, where the audit has it): "
        f"{len(confirmed)} of {len(checked)} confirmed",
        "",
        "| model_type | architecture | vLLM's port | failing (or unjudged) checks | mmport's port | first difference or reason (vLLM's port) | on checkpoint geometry | reproduce |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in audited:
        ours = a.mmport.verdict if a.mmport else ""
        verdict = (
            f"[fail](findings/audit/{a.model_type}.md)"
            if a.vllm.reproducer
            else a.vllm.verdict
        )
        row = [
            a.model_type,
            a.architecture,
            verdict,
            ", ".join(a.vllm.checks),
            ours,
            _cell(a.vllm.detail),
            a.vllm.confirmation.split(":", 1)[0],
            f"`{a.command()}`",
        ]
        lines.append("| " + " | ".join(row) + " |")
    left_out = [a for a in audits if not a.vllm]
    if left_out:
        lines += ["", "## Not audited", "", "| model_type | why |", "|---|---|"]
        lines += [f"| {a.model_type} | {_cell(a.note)} |" for a in left_out]
    return "\n".join(lines) + "\n"


def write_reproducers(audits: list[Audit], directory: Path) -> None:
    """One file per failing vLLM port (stale ones removed): what docs/audit.md's fail rows link."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.md"):
        stale.unlink()
    for a in audits:
        if a.vllm and a.vllm.reproducer:
            (directory / f"{a.model_type}.md").write_text(a.vllm.reproducer)


def main() -> None:
    """Run the audit (or serve as one of its workers, with ``--worker``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pool_arguments(parser, "audit", TIME_LIMIT_S)
    parser.add_argument("--write", action="store_true", help="rewrite docs/audit.md")
    args = parser.parse_args()
    if args.worker:
        serve(lambda model_type: asdict(audit_one(model_type)), _warm_up)
        return
    import transformers
    import vllm
    from family_coverage import families

    chosen = args.families or list(families())
    started = time.perf_counter()
    audits = run_all(chosen, args.jobs, args.time_limit)
    for a in audits:
        theirs = f"{a.vllm.verdict:12} {a.vllm.detail}" if a.vllm else a.note
        print(
            f"{a.model_type:28} mmport={a.mmport.verdict if a.mmport else '-':12} vllm={theirs}"
        )
    versions = f"vLLM {vllm.__version__}, transformers {transformers.__version__}, {os.cpu_count()} cores"
    text = render_markdown(audits, versions, time.perf_counter() - started, args.jobs)
    if args.write:
        (ROOT / "docs" / "audit.md").write_text(text)
        write_reproducers(audits, ROOT / "docs" / "findings" / "audit")
    print(text.split("| model_type")[0])


if __name__ == "__main__":
    main()
