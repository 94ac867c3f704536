"""A small pool of long-lived worker processes, for the per-family benchmarks (audit, coverage).

(``verify --manifest`` runs on pytest-xdist instead: :mod:`mmport.testing.run`.)

Each worker is a fresh interpreter that imports torch and transformers once
and then runs job after job (a port, or a model family, each), so that a run
pays that import per worker rather than per job. A job that hangs past its
time limit, or kills its worker, is reported as such and the worker is
replaced; the other jobs go on::

    pool = WorkerPool(["python", "benchmarks/family_coverage.py", "--worker"], jobs=2, time_limit=300)
    for job, result in pool.run(["llava", "qwen2_vl"]):
        ...  # result is the worker's JSON answer, or a WorkerFailure

The protocol is one JSON line per job on the worker's stdin and one JSON line
per answer on its stdout; a worker sends its own stdout to stderr first (see
:func:`serve`), so library output never corrupts an answer.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["WorkerFailure", "WorkerPool", "add_pool_arguments", "serve"]


@dataclass(frozen=True)
class WorkerFailure:
    """A job that produced no answer: ``kind`` is ``"timeout"`` or ``"crash"``."""

    kind: str
    detail: str
    seconds: float


@dataclass
class _Worker:
    """One worker process, the job it runs (None when idle) and its unread answer bytes."""

    process: subprocess.Popen[bytes]
    stderr: IO[bytes]
    job: Any = None
    started: float = 0.0

    @property
    def stdin(self) -> IO[bytes]:
        """The worker's stdin: a pipe, as :meth:`WorkerPool._start` opens it."""
        assert self.process.stdin is not None
        return self.process.stdin

    @property
    def stdout(self) -> IO[bytes]:
        """The worker's stdout: a pipe, as :meth:`WorkerPool._start` opens it."""
        assert self.process.stdout is not None
        return self.process.stdout

    buffer: bytes = field(default=b"")


class WorkerPool:
    """Runs jobs on ``jobs`` workers started with ``command``; see the module docstring."""

    def __init__(
        self,
        command: list[str],
        *,
        jobs: int,
        time_limit: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.command = command
        self.jobs = max(1, jobs)
        self.time_limit = time_limit
        self.cwd = cwd
        self.env = env
        self._selector = selectors.DefaultSelector()

    def _start(self) -> _Worker:
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 - open as long as its worker; _stop closes it
        process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=self.cwd,
            env=self.env,
            bufsize=0,
        )
        worker = _Worker(process, stderr)
        self._selector.register(worker.stdout, selectors.EVENT_READ, worker)
        return worker

    def _stop(self, worker: _Worker) -> None:
        if worker.stderr.closed:
            return  # stopped already
        self._selector.unregister(worker.stdout)
        worker.stdin.close()
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait()
        worker.stderr.close()

    def _assign(self, worker: _Worker, job: Any) -> None:
        worker.job, worker.started, worker.buffer = job, time.perf_counter(), b""
        worker.stdin.write((json.dumps(job) + "\n").encode())
        worker.stdin.flush()

    @staticmethod
    def _stderr_tail(worker: _Worker) -> str:
        worker.stderr.seek(0)
        lines = worker.stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no output"

    def run(
        self, jobs: list[Any], on_start: Callable[[Any], None] | None = None
    ) -> Iterator[tuple[Any, Any]]:
        """Yield ``(job, answer)`` as jobs finish; an answer is the worker's JSON or a WorkerFailure."""
        pending = list(reversed(jobs))
        workers = [self._start() for _ in range(min(self.jobs, len(jobs)))]
        try:
            for worker in workers:
                self._next(worker, pending, on_start)
            while any(w.job is not None for w in workers):
                yield from self._wait(workers, pending, on_start)
        finally:
            for worker in workers:
                self._stop(worker)

    def _next(self, worker: _Worker, pending: list[Any], on_start) -> None:
        if pending:
            job = pending.pop()
            if on_start:
                on_start(job)
            self._assign(worker, job)
        else:
            worker.job = None

    def _wait(
        self, workers: list[_Worker], pending: list[Any], on_start
    ) -> Iterator[tuple[Any, Any]]:
        busy = [w for w in workers if w.job is not None]
        deadline = min(w.started for w in busy) + self.time_limit
        for key, _ in self._selector.select(
            timeout=max(0.0, deadline - time.perf_counter())
        ):
            worker = key.data
            chunk = os.read(worker.process.stdout.fileno(), 1 << 16)
            if not chunk:  # the worker died
                if worker.job is not None:
                    yield (
                        worker.job,
                        WorkerFailure(
                            "crash",
                            self._stderr_tail(worker),
                            time.perf_counter() - worker.started,
                        ),
                    )
                self._replace(workers, worker, pending, on_start)
                continue
            worker.buffer += chunk
            while b"\n" in worker.buffer and worker.job is not None:
                line, worker.buffer = worker.buffer.split(b"\n", 1)
                yield worker.job, json.loads(line)
                self._next(worker, pending, on_start)
        now = time.perf_counter()
        for worker in [
            w
            for w in workers
            if w.job is not None and now - w.started > self.time_limit
        ]:
            yield (
                worker.job,
                WorkerFailure(
                    "timeout", f"over {self.time_limit:.0f} s", now - worker.started
                ),
            )
            self._replace(workers, worker, pending, on_start)

    def _replace(
        self, workers: list[_Worker], worker: _Worker, pending: list[Any], on_start
    ) -> None:
        """Stop ``worker``; a fresh one takes the next job, if any is left."""
        self._stop(worker)
        worker.job = None
        if pending:
            fresh = self._start()
            workers[workers.index(worker)] = fresh
            self._next(fresh, pending, on_start)


def serve(
    handle: Callable[[Any], Any], warm_up: Callable[[], None] = lambda: None
) -> None:
    """The worker's side: answer each JSON line on stdin with ``handle(job)`` as a JSON line.

    Anything else written to stdout (libraries print) goes to stderr instead.
    """
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    warm_up()
    for line in sys.stdin:
        answers.write(json.dumps(handle(json.loads(line))) + "\n")


def add_pool_arguments(parser: Any, what: str, time_limit: float) -> None:
    """The arguments every per-family benchmark takes: the families, its workers and their time limit.

    ``what`` says what is done to each family ("run", "audit"), for the help text.
    """
    import argparse

    parser.add_argument(
        "families", nargs="*", help=f"model_types to {what} (default: every family)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--jobs", type=int, default=2, help="worker processes (default 2)"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=time_limit,
        help="seconds one family may take",
    )
