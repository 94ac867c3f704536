"""Verify many ports in one run: the ports of a manifest, on a pool of worker processes.

Each worker imports torch and transformers once and verifies port after port
(:mod:`mmport.pool`); with one worker the ports run in this process. This
module itself imports neither, nor :mod:`mmport.verify`, so that the workers
start while the command has barely begun.
A port never stops the run: whatever happens to it becomes a
:class:`PortOutcome` with the exit code ``mmport verify REF --port PORT``
would have given on its own, and the run's code is the worst of them::

    outcomes = verify_many(load_manifest(Path("pyproject.toml")), workers=2)
    exit_code(outcomes)      # 0 all pass, 1 a check failed, 2 bad input, 3 mmport failed, 4 cannot judge
    combined_junit(outcomes)  # <testsuites>: one <testsuite> per port, a <testcase> per check

``python -m mmport.manifest.run --worker`` is the worker's side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from mmport.errors import EXIT_CODES, verdict_exit_code, worst_exit_code
from mmport.manifest import ManifestEntry
from mmport.pool import WorkerFailure, WorkerPool, serve

__all__ = [
    "PortOutcome",
    "combined_json",
    "combined_junit",
    "default_workers",
    "exit_code",
    "verify_many",
]

# A port that takes longer is reported as timed out and its worker replaced:
# the slowest family of docs/coverage.md takes about a minute.
PORT_TIME_LIMIT_S = 900

# What each exit code means for one port, as the summary table says it.
VERDICTS = EXIT_CODES


@dataclass
class PortOutcome:
    """What verifying one manifest entry gave: the single-port exit code and its reports."""

    entry: ManifestEntry
    code: int  # 0 pass, 1 a check failed, 2 bad input, 3 mmport failed (or its worker died or hung), 4 cannot judge
    seconds: float
    report_json: str = ""  # Report.to_json(), when verify ran to the end
    report_junit: str = ""  # Report.to_junit(), likewise
    report_html: str = ""  # the single-port HTML page, when the run asked for pages
    error: str = ""  # the one line a bad input or a failure of mmport's gave
    failing: list[str] = field(default_factory=list)  # names of the failed checks
    unjudged: list[str] = field(
        default_factory=list
    )  # ``check: what the snapshot lacks``, per check that cannot judge

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, ``bad input``, ``error`` or ``cannot judge``."""
        return VERDICTS[self.code]


def default_workers() -> int:
    """Two workers, or one on a single core: each holds a torch and a transformers (about 1 GB)."""
    return min(2, os.cpu_count() or 1)


def exit_code(outcomes: list[PortOutcome]) -> int:
    """The worst single-port code: an mmport failure (3) over bad input (2) over a failed check (1) over cannot judge (4)."""
    return worst_exit_code(o.code for o in outcomes)


def verify_many(
    entries: list[ManifestEntry],
    *,
    workers: int,
    probes: int = 8,
    seed: int = 0,
    backend: str = "auto",
    on_start: Callable[[ManifestEntry], None] | None = None,
    on_done: Callable[[PortOutcome], None] | None = None,
    time_limit: float = PORT_TIME_LIMIT_S,
    html: bool = False,
) -> list[PortOutcome]:
    """Verify every entry on ``workers`` processes; the outcomes in the entries' order.

    With ``html`` each worker renders its port's HTML page too (with the count curves).

    ``on_start`` and ``on_done`` hear of each port as it starts and ends (for a progress bar).
    """
    jobs = [
        _job(index, entry, probes, seed, backend, html)
        for index, entry in enumerate(entries)
    ]
    started = on_start or (lambda entry: None)
    done = on_done or (lambda outcome: None)
    outcomes: dict[int, PortOutcome] = {}
    for job, answer in _answers(
        jobs, workers, time_limit, lambda job: started(entries[job["index"]])
    ):
        outcome = outcomes[job["index"]] = _outcome(entries[job["index"]], answer)
        done(outcome)
    return [outcomes[index] for index in range(len(entries))]


def _job(
    index: int, entry: ManifestEntry, probes: int, seed: int, backend: str, html: bool
) -> dict[str, Any]:
    """One port as a worker's JSON job."""
    return {
        "index": index,
        "ref": entry.ref,
        "port": str(entry.port),
        "processor_kwargs": entry.processor_kwargs,
        "trust_remote_code": entry.trust_remote_code,
        "model": entry.model,
        "probes": probes,
        "seed": seed,
        "backend": backend,
        "html": html,
    }


def _answers(
    jobs: list[dict], workers: int, time_limit: float, on_start: Callable[[dict], None]
) -> Iterator[tuple[dict, Any]]:
    """``(job, answer)`` pairs: from a pool of workers, or from this process with one worker."""
    if workers <= 1 or len(jobs) <= 1:
        # A second interpreter would only add its torch import. The price: no time
        # limit here, and a port that kills the interpreter ends the run.
        for job in jobs:
            on_start(job)
            yield job, run_job(job)
        return
    # Workers share the cores: each with every core as torch threads would oversubscribe them.
    threads = max(1, (os.cpu_count() or 1) // workers)
    backend = jobs[0]["backend"]
    command = [
        sys.executable,
        "-m",
        "mmport.manifest.run",
        "--worker",
        "--threads",
        str(threads),
        "--backend",
        backend,
    ]
    yield from WorkerPool(
        command, jobs=workers, time_limit=time_limit, env=_worker_env()
    ).run(jobs, on_start=on_start)


def _worker_env() -> dict[str, str]:
    """This environment, with the directory this mmport was imported from first on the path.

    Workers must run the very mmport this process runs, whichever put it on
    ``sys.path`` (a checkout, an install); a fresh interpreter may find another, or none.
    """
    import mmport

    source = str(Path(mmport.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Verify the port of one job (in this process); the answer as JSON-ready data, never a raise."""
    from mmport.errors import MmportError, one_line
    from mmport.verify import ModelOptions, verify_port

    started = time.perf_counter()
    try:
        report = verify_port(
            job["ref"],
            Path(job["port"]),
            probes=job["probes"],
            seed=job["seed"],
            backend=job["backend"],
            model=ModelOptions() if job["model"] else None,
            processor_kwargs=job["processor_kwargs"],
            trust_remote_code=job["trust_remote_code"],
            curves=job.get("html", False),
        )
    except MmportError as exc:
        return {
            "code": exc.exit_code,
            "error": str(exc).strip(),
            "seconds": time.perf_counter() - started,
        }
    except (
        Exception
    ) as exc:  # a bug of mmport's: this port's row says so, the other ports go on
        return {
            "code": 3,
            "error": f"internal error: {one_line(exc)}",
            "seconds": time.perf_counter() - started,
        }
    failing = [c.name for c in report.checks.values() if c.status == "fail"]
    unjudged = [
        f"{c.name}: {c.unjudged[0].lacking.describe()}"
        for c in report.checks.values()
        if c.status == "cannot_judge"
    ]
    return {
        "code": verdict_exit_code(report.verdict),
        "seconds": report.seconds,
        "json": report.to_json(),
        "junit": report.to_junit(),
        "html": _html(report) if job.get("html") else "",
        "failing": failing,
        "unjudged": unjudged,
    }


def _html(report: Any) -> str:
    from mmport.verify.html import render_html

    return render_html(report)


def _outcome(
    entry: ManifestEntry, answer: dict[str, Any] | WorkerFailure
) -> PortOutcome:
    """A worker's answer (or the pool's WorkerFailure) as a PortOutcome."""
    if isinstance(answer, WorkerFailure):
        what = "hung" if answer.kind == "timeout" else "died"
        return PortOutcome(
            entry,
            3,
            answer.seconds,
            error=f"the worker verifying this port {what}: {answer.detail}",
        )
    return PortOutcome(
        entry,
        answer["code"],
        answer["seconds"],
        report_json=answer.get("json", ""),
        report_junit=answer.get("junit", ""),
        report_html=answer.get("html", ""),
        error=answer.get("error", ""),
        failing=answer.get("failing", []),
        unjudged=answer.get("unjudged", []),
    )


def combined_junit(outcomes: list[PortOutcome]) -> str:
    """One JUnit file: a ``<testsuite>`` per port (its own report's), a ``<testcase>`` per check.

    A port that did not run to the end is a suite of one ``verify`` case carrying the error.
    """
    root = ET.Element("testsuites", name="mmport verify")
    for outcome in outcomes:
        suite = (
            ET.fromstring(outcome.report_junit)
            if outcome.report_junit
            else _error_suite(outcome)
        )
        # Two ports of one REF would share a suite name; the port's path tells them apart.
        suite.set("name", f"mmport verify {outcome.entry.ref} ({outcome.entry.label})")
        for case in suite.iter("testcase"):
            case.set("file", outcome.entry.label)
        root.append(suite)
    for total in ("tests", "failures", "errors", "skipped"):
        root.set(total, str(sum(int(suite.get(total, "0")) for suite in root)))
    root.set("time", f"{sum(o.seconds for o in outcomes):.3f}")
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _error_suite(outcome: PortOutcome) -> ET.Element:
    """The suite of a port verify could not finish: one errored ``verify`` case."""
    suite = ET.Element(
        "testsuite",
        tests="1",
        failures="0",
        errors="1",
        skipped="0",
        time=f"{outcome.seconds:.3f}",
    )
    case = ET.SubElement(
        suite, "testcase", classname=f"mmport.verify.{outcome.entry.ref}", name="verify"
    )
    ET.SubElement(
        case,
        "error",
        message=outcome.error.splitlines()[0] if outcome.error else outcome.verdict,
    ).text = outcome.error
    return suite


def combined_json(outcomes: list[PortOutcome]) -> str:
    """A JSON list: each port's own JSON report, or for a port that did not finish, its error."""
    reports = [
        json.loads(o.report_json)
        if o.report_json
        else {
            "ref": o.entry.ref,
            "port": str(o.entry.port),
            "passed": False,
            "exit_code": o.code,
            "error": o.error,
            "seconds": round(o.seconds, 3),
        }
        for o in outcomes
    ]
    return json.dumps(reports, indent=2)


def _warm_up(threads: int, backend: str) -> None:
    """What every port needs, imported once per worker (verify_port imports these lazily)."""
    # Imported for their cost, paid here once, not for their names.
    import torch
    import transformers  # noqa: F401

    import mmport.sources
    import mmport.verify.embeds
    import mmport.verify.model_check
    import mmport.verify.reference
    import mmport.verify.session  # noqa: F401
    from mmport.runtime.backends import select_backend

    torch.set_num_threads(threads)
    with contextlib.suppress(
        Exception
    ):  # a bad backend: the first job reports it, as its own error
        select_backend(backend)  # imports vLLM, when it is the backend


def main() -> None:
    """The worker's side: ``python -m mmport.manifest.run --worker`` answers jobs on stdin."""
    parser = argparse.ArgumentParser(
        description="A worker of mmport verify --manifest (not for direct use)."
    )
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args()
    serve(run_job, lambda: _warm_up(args.threads, args.backend))


if __name__ == "__main__":
    main()
