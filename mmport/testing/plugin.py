"""The plugin object registered when a manifest is configured (see :mod:`mmport.pytest_plugin`).

It reads the manifest once (with :func:`mmport.manifest.load_manifest`, as
``mmport verify --manifest`` does), collects it, keeps this run's shard of
its ports, and sums each port's time from its items' reports, so the next
split can be balanced by it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mmport.testing.items import PORT_PROPERTY, ManifestDirectory, ManifestFile
from mmport.testing.shard import Shard, read_durations, shard_labels, write_durations

if TYPE_CHECKING:
    from mmport.manifest import ManifestEntry

__all__ = ["ManifestPlugin"]

# Where pytest's cache keeps the last measured seconds per port (``pytest --cache-show mmport/*``).
CACHE_KEY = "mmport/durations"
MARKER = "mmport: a check of a port in the [tool.mmport] manifest (added by mmport's pytest plugin)"


class ManifestPlugin:
    """Collects the manifest at ``manifest`` as ports and checks, and records how long each port took."""

    NAME = "mmport-manifest"

    def __init__(self, config: pytest.Config, manifest: Path) -> None:
        self.config = config
        self.manifest = manifest
        self.named = _named(_load(manifest))
        self.shard = _shard(config)
        self.durations_file = _durations_file(config)
        self.seconds: dict[str, float] = defaultdict(float)
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add the phase's time to its port's (setup holds the verify run; under xdist, reports arrive here from the workers)."""
        port = dict(report.user_properties).get(PORT_PROPERTY)
        if isinstance(port, str):
            self.seconds[port] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Record the ports' times: in pytest's cache always, in the durations file when asked to."""
        if hasattr(self.config, "workerinput") or not self.seconds:
            return  # an xdist worker: the controller saw every report and records them
        measured = {port: round(seconds, 3) for port, seconds in self.seconds.items()}
        if self.config.cache is not None:
            self.config.cache.set(
                CACHE_KEY, {**self.config.cache.get(CACHE_KEY, {}), **measured}
            )
        if self.config.getoption("mmport_store_durations"):
            write_durations(self.durations_file, measured)


def _load(manifest: Path) -> list[ManifestEntry]:
    """The manifest's entries; a mistake in it is a usage error, before any collection."""
    from mmport.errors import ManifestError
    from mmport.manifest import load_manifest

    try:
        return load_manifest(manifest)
    except ManifestError as exc:
        raise pytest.UsageError(str(exc)) from exc


def _named(entries: list[ManifestEntry]) -> dict[str, ManifestEntry]:
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
