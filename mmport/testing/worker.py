"""What a pytest-xdist worker does around the ports it verifies: warm up, share the cores, survive a port that kills it.

Before its first port, a worker imports what every port needs and gives
torch ``cpu_count / workers`` threads (:meth:`WorkerGuard.start`), so that no
port's time carries the imports and the workers do not oversubscribe the cores.

pytest-xdist replaces a worker that dies, and hands the port it was on to a
fresh one, which would die on it in turn: a port that calls ``os._exit`` when
imported (or hangs until its time limit fires) could use up every restart and
stop the run. So a worker marks each port in a directory the controller
shares with every worker (``pytest_configure_node`` passes it) before
verifying it, and clears the mark after; a worker that finds the mark already
there knows a worker before it died on that port, and errors its checks
instead of verifying it again::

    guard = WorkerGuard.of(config)
    if (why := guard.died_on(name)) is not None:
        pytest.fail(why)
    with guard.watching(name):
        verify(...)

Outside a worker (pytest without ``-n``) the guard does nothing: a port that
kills the process ends the run, as it would any test.

On the controller, :func:`drop_finished_units` keeps xdist's loadscope
scheduler from handing a fresh worker nothing to do after a crash.
"""

from __future__ import annotations

import faulthandler
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "PORT_TIME_LIMIT_S",
    "QUICK_EXIT_KEY",
    "WORKER_INPUT_KEY",
    "WorkerGuard",
    "drop_finished_units",
]

# A port verifying longer than this kills its worker (the slowest family of docs/coverage.md
# takes about a minute); the fresh worker reports it as hung.
PORT_TIME_LIMIT_S = 900.0
# The key of ``config.workerinput`` that names the directory of marks.
WORKER_INPUT_KEY = "mmport_marks"
# The key that asks a worker to skip Python's own shutdown once pytest is done with it:
# set unless ``--mmport-full-exit`` (unloading torch and transformers took 2.5 s of a 15 s run).
QUICK_EXIT_KEY = "mmport_quick_exit"


class WorkerGuard:
    """Marks, in a directory shared with the controller, the port this xdist worker is verifying."""

    def __init__(
        self,
        marks: Path | None,
        workers: int,
        time_limit: float = PORT_TIME_LIMIT_S,
        quick_exit: bool = False,
    ) -> None:
        self.marks = marks  # None: not an xdist worker, nothing to guard
        self.workers = workers
        self.time_limit = time_limit
        self.quick_exit = quick_exit

    @classmethod
    def of(cls, config: pytest.Config) -> WorkerGuard:
        """The guard of this process: active on an xdist worker whose controller sent a directory."""
        workerinput = getattr(config, "workerinput", None) or {}
        marks = workerinput.get(WORKER_INPUT_KEY)
        count = int(workerinput.get("workercount", 1))
        quick = bool(workerinput.get(QUICK_EXIT_KEY))
        return cls(Path(marks) if marks else None, count, quick_exit=quick)

    def start(self) -> None:
        """On a worker: the imports every port needs, once, and its share of the cores."""
        if self.marks is None:
            return
        # Imported for their cost, paid here once (verify_port imports them lazily), not for their names.
        # transformers' processing_auto pulls in every image, video and audio processor
        # module (torchvision, torchaudio, scipy): 3 s of a first port's 4 s here.
        import torch
        import transformers.models.auto.processing_auto  # noqa: F401

        import mmport.verify.embeds
        import mmport.verify.model_check
        import mmport.verify.probes
        import mmport.verify.reference
        import mmport.verify.session  # noqa: F401

        # Each worker with a thread per core would oversubscribe them: verify ran 5-7 times slower so.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.workers))

    def end(self) -> None:
        """On a worker asked to, end the process now that pytest is done with it.

        Its results are with the controller already ("workerfinished"), which
        otherwise waits while the interpreter unloads torch and transformers:
        seconds per run. Plugins save their data before this point (pytest-cov
        in ``pytest_sessionfinish``); one that writes at interpreter exit needs
        ``--mmport-full-exit``.
        """
        if self.quick_exit:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def died_on(self, name: str) -> str | None:
        """Why this port is not verified again (a worker died or hung on it), or None."""
        if self.marks is None or not self._mark(name).exists():
            return None
        started = float(self._mark(name).read_text() or 0)
        if time.time() - started >= self.time_limit:
            return f"the worker verifying this port hung: over {self.time_limit:.0f} s"
        return "the worker verifying this port died (its process exited while verifying it)"

    @contextmanager
    def watching(self, name: str) -> Iterator[None]:
        """Mark the port while it is verified; past the time limit, end this worker (it hung)."""
        if self.marks is None:
            yield
            return
        self._mark(name).write_text(str(time.time()))
        # A hang in C code never returns to Python: only ending the process stops it, and
        # xdist then starts a fresh worker. The traceback goes to the terminal, not the capture.
        faulthandler.dump_traceback_later(
            self.time_limit, exit=True, file=sys.__stderr__ or sys.stderr
        )
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
            self._mark(name).unlink(missing_ok=True)

    def _mark(self, name: str) -> Path:
        assert self.marks is not None
        return self.marks / hashlib.sha1(name.encode()).hexdigest()


def drop_finished_units(scheduler: Any) -> None:
    """After a worker died, take the work units it had finished out of xdist's queue again.

    pytest-xdist's loadscope scheduler (3.8) puts back *every* unit (here: a
    port) the dead worker held, finished ones too. A fresh worker handed a
    finished unit gets no test to run, so no test of it ever completes to ask
    for the next unit, and the run waits forever on the port still queued.
    Other schedulers keep no ``workqueue``: nothing to do.
    """
    queue = getattr(scheduler, "workqueue", None)
    if not isinstance(queue, dict):
        return
    for scope in [scope for scope, unit in queue.items() if all(unit.values())]:
        del queue[scope]
