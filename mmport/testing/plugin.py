"""The plugin object registered when a manifest is configured (see :mod:`mmport.pytest_plugin`).

It reads the manifest once (with :func:`mmport.manifest.load_manifest`),
collects it, keeps this run's shard of its ports, and sums each port's time
from its items' reports, so the next split can be balanced by it.

It also carries each port's :class:`~mmport.manifest.outcome.PortOutcome`
from where the port was verified to pytest's controller: the port's first
report takes it along as an attribute (pytest-xdist ships a report's
attributes from its workers), and the controller keeps it in
:attr:`ManifestPlugin.outcomes`, which ``mmport verify --manifest`` reads and
``--mmport-html DIR`` turns into pages.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mmport.testing.items import (
    PORT_PROPERTY,
    CheckItem,
    ManifestDirectory,
    ManifestFile,
)
from mmport.testing.shard import Shard, read_durations, shard_labels, write_durations
from mmport.testing.worker import (
    QUICK_EXIT_KEY,
    WORKER_INPUT_KEY,
    WorkerGuard,
    drop_finished_units,
)

if TYPE_CHECKING:
    from mmport.manifest import ManifestEntry
    from mmport.manifest.outcome import PortOutcome

__all__ = ["OUTCOME_ATTRIBUTE", "ManifestPlugin", "port_names"]

# The attribute of a port's first report that holds its outcome (as PortOutcome.to_data()).
OUTCOME_ATTRIBUTE = "mmport_outcome"

# Where pytest's cache keeps the last measured seconds per port (``pytest --cache-show mmport/*``).
CACHE_KEY = "mmport/durations"
MARKER = "mmport: a check of a port in the [tool.mmport] manifest (added by mmport's pytest plugin)"


class ManifestPlugin:
    """Collects the manifest at ``manifest`` as ports and checks, and records how long each port took."""

    NAME = "mmport-manifest"

    def __init__(self, config: pytest.Config, manifest: Path) -> None:
        self.config = config
        self.manifest = manifest
        self.named = port_names(_load(manifest))
        self.shard = _shard(config)
        self.durations_file = _durations_file(config)
        self.html = _html_dir(config)
        self.guard = WorkerGuard.of(config)
        self.seconds: dict[str, float] = defaultdict(float)
        # On the controller: each port's outcome, by node name, as its first report brings it.
        self.outcomes: dict[str, PortOutcome] = {}
        # The directory of WorkerGuard's marks, made when the first xdist worker starts.
        self._marks: Path | None = None
        config.addinivalue_line("markers", MARKER)
        _add_collection_arg(config, manifest)

    def ports(self) -> list[tuple[str, ManifestEntry]]:
        """``(node name, entry)`` of the ports this run verifies: all of them, or this shard's."""
        if self.shard is None:
            return list(self.named.items())
        try:
            durations = read_durations(self.durations_file)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from exc
        return [
            (name, self.named[name])
            for name in shard_labels(list(self.named), self.shard, durations)
        ]

    def pytest_collect_file(
        self, file_path: Path, parent: pytest.Collector
    ) -> ManifestFile | None:
        """The manifest, when it is a file pytest's collection reaches."""
        if file_path.resolve() == self.manifest:
            return ManifestFile.from_parent(parent, path=file_path, plugin=self)
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(
        self, path: Path, parent: pytest.Collector
    ) -> ManifestDirectory | None:
        """The manifest, when it is a directory of ports: collected as ports, not as Python files."""
        if path.resolve() == self.manifest:
            return ManifestDirectory.from_parent(parent, path=path, plugin=self)
        return None

    def pytest_sessionstart(self) -> None:
        """On a pytest-xdist worker, warm up before the first port (see :mod:`mmport.testing.worker`)."""
        self.guard.start()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """pytest-xdist starts a worker: where to mark the port it verifies, and whether to end quickly (see :mod:`mmport.testing.worker`)."""
        if self._marks is None:
            self._marks = Path(tempfile.mkdtemp(prefix="mmport-workers-"))
        node.workerinput[WORKER_INPUT_KEY] = str(self._marks)
        node.workerinput[QUICK_EXIT_KEY] = not self.config.getoption("mmport_full_exit")

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, sched: Any) -> None:
        """A worker died on a port: requeue only the ports it had not finished (see :func:`drop_finished_units`)."""
        drop_finished_units(sched)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """The setup report of a port's first item takes the port's outcome along (once per port)."""
        report = yield
        if call.when == "setup" and isinstance(item, CheckItem):
            outcome = item.port.take_outcome()
            if outcome is not None:
                setattr(report, OUTCOME_ATTRIBUTE, outcome.to_data())
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add the phase's time to its port's, and keep the port's outcome (under xdist, reports arrive here from the workers)."""
        port = dict(report.user_properties).get(PORT_PROPERTY)
        if not isinstance(port, str):
            return
        self.seconds[port] += report.duration
        data = getattr(report, OUTCOME_ATTRIBUTE, None)
        if data is not None and port in self.named:
            from mmport.manifest.outcome import PortOutcome

            self.outcomes[port] = PortOutcome.from_data(self.named[port], data)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Record the ports' times (in pytest's cache always, in the durations file when asked to); write the pages asked for."""
        if hasattr(self.config, "workerinput"):
            return  # an xdist worker: the controller saw every report and records them
        if self.html is not None and self.outcomes:
            from mmport.manifest.html import write_html_reports

            write_html_reports(self.ordered_outcomes(), self.html)
        if not self.seconds:
            return
        measured = {port: round(seconds, 3) for port, seconds in self.seconds.items()}
        cache = getattr(self.config, "cache", None)  # absent under -p no:cacheprovider
        if cache is not None:
            cache.set(CACHE_KEY, {**cache.get(CACHE_KEY, {}), **measured})
        if self.config.getoption("mmport_store_durations"):
            write_durations(self.durations_file, measured)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        """Remove the workers' marks (they only matter while the session runs); a worker may end here."""
        if self._marks is not None:
            shutil.rmtree(self._marks, ignore_errors=True)
        self.guard.end()

    def ordered_outcomes(self) -> list[PortOutcome]:
        """The outcomes this run gathered, in the manifest's order."""
        return [self.outcomes[name] for name in self.named if name in self.outcomes]


def _load(manifest: Path) -> list[ManifestEntry]:
    """The manifest's entries; a mistake in it is a usage error, before any collection."""
    from mmport.errors import ManifestError
    from mmport.manifest import load_manifest

    try:
        return load_manifest(manifest)
    except ManifestError as exc:
        raise pytest.UsageError(str(exc)) from exc


def port_names(entries: list[ManifestEntry]) -> dict[str, ManifestEntry]:
    """Each entry under a unique node name: its label, ``label#2`` for the second entry of the same port."""
    named: dict[str, ManifestEntry] = {}
    for entry in entries:
        name, repeat = entry.label, 1
        while name in named:
            repeat += 1
            name = f"{entry.label}#{repeat}"
        named[name] = entry
    return named


def _shard(config: pytest.Config) -> Shard | None:
    """``--mmport-shard``, parsed; None without it."""
    spec = config.getoption("mmport_shard")
    if not spec:
        return None
    try:
        return Shard.parse(spec)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


def _html_dir(config: pytest.Config) -> Path | None:
    """``--mmport-html``, relative to where pytest was invoked; None without it."""
    given = config.getoption("mmport_html")
    return config.invocation_params.dir / given if given else None


def _durations_file(config: pytest.Config) -> Path:
    """``--mmport-durations``, else the ``mmport_durations`` ini value, relative to the rootdir."""
    given = config.getoption("mmport_durations")
    if given:
        return config.invocation_params.dir / given
    return config.rootpath / config.getini("mmport_durations")


def _add_collection_arg(config: pytest.Config, manifest: Path) -> None:
    """Make pytest's collection reach the manifest when the user named no test paths (or named the manifest itself).

    ``testpaths = ["tests"]`` would otherwise keep a rootdir pyproject.toml out of
    a plain ``pytest``; paths on the command line say what to run, unless the
    manifest came from ``--mmport-manifest``.
    """
    named_paths = (
        config.args_source == pytest.Config.ArgsSource.ARGS
        and config.getoption("mmport_manifest") is None
    )
    if named_paths or any(
        _covers(config.invocation_params.dir, arg, manifest) for arg in config.args
    ):
        return
    config.args.append(str(manifest))


def _covers(invocation_dir: Path, arg: str, manifest: Path) -> bool:
    """Whether collecting ``arg`` (a path, maybe with ``::`` node parts) reaches ``manifest``."""
    path = (invocation_dir / arg.split("::", 1)[0]).resolve()
    return path == manifest or path in manifest.parents
