"""``mmport verify --manifest``: the manifest's ports verified by pytest, with mmport's plugin, in this process.

The command is a pytest run of :mod:`mmport.testing`'s items (one per port
and check): ``--workers N`` is pytest-xdist's ``-n N --dist loadscope`` (each
port's checks on one worker, so each port is verified once), ``--junit FILE``
is pytest's ``--junitxml``. pytest's own terminal output is set aside; the
command shows its progress bar and builds its table, JSON and HTML from the
:class:`~mmport.manifest.outcome.PortOutcome` each port's first report brings
to this process::

    outcomes = run_manifest(Path("pyproject.toml"), entries, RunOptions(workers=2))

The run is kept apart from the project it verifies, so that the command
means the same in every project: no ini file, no ``conftest.py``, no plugin
but mmport's and xdist's, nothing from ``PYTEST_ADDOPTS``, no
``.pytest_cache`` written.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

from mmport.errors import MmportError
from mmport.manifest import ManifestEntry
from mmport.manifest.outcome import PortOutcome
from mmport.testing.items import PORT_PROPERTY
from mmport.testing.plugin import OUTCOME_ATTRIBUTE, ManifestPlugin, port_names

__all__ = ["RunOptions", "default_workers", "pytest_args", "run_manifest"]

# pytest's codes for a run that went wrong before or around the tests, not in them.
BROKEN_RUN = (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR)


@dataclass(frozen=True)
class RunOptions:
    """How ``verify --manifest`` runs: workers, the probes every port gets, and the reports to write."""

    workers: int
    probes: int = 8
    seed: int = 0
    backend: str = "auto"
    junit: Path | None = None
    html: Path | None = None


def default_workers() -> int:
    """Two workers, or one on a single core: each holds a torch and a transformers (about 1 GB)."""
    return min(2, os.cpu_count() or 1)


def pytest_args(manifest: Path, options: RunOptions, ports: int) -> list[str]:
    """The pytest command line that verifies ``manifest`` (of ``ports`` entries) as ``options`` say."""
    args = [str(manifest), f"--mmport-manifest={manifest}"]
    # Isolation: -c names an empty config, so the project's ini options stay out.
    args += ["-c", os.devnull, f"--rootdir={manifest.parent}", "--noconftest"]
    args += ["--disable-plugin-autoload", "-p", "mmport.pytest_plugin"]
    # No .pytest_cache in the user's project; and mmport's plugin, imported before pytest
    # could rewrite its asserts, has none to rewrite (pytest would warn that it could not).
    args += ["-p", "no:cacheprovider", "--assert=plain"]
    args += [f"--mmport-probes={options.probes}", f"--mmport-seed={options.seed}"]
    args += [
        f"--mmport-backend={options.backend}",
        "-o",
        "junit_suite_name=mmport verify",
    ]
    if options.workers > 1 and ports > 1:
        # A port kills at most one worker (mmport.testing.worker): one restart each is enough.
        args += ["-p", "xdist.plugin", f"-n={options.workers}", "--dist=loadscope"]
        args.append(f"--max-worker-restart={ports}")
    if options.junit is not None:
        args.append(f"--junitxml={options.junit}")
    if options.html is not None:
        args.append(f"--mmport-html={options.html}")
    return args


def run_manifest(
    manifest: Path,
    entries: list[ManifestEntry],
    options: RunOptions,
    on_start: Callable[[ManifestEntry], None] | None = None,
    on_done: Callable[[PortOutcome], None] | None = None,
) -> list[PortOutcome]:
    """Verify every entry of ``manifest`` under pytest; the outcomes in the entries' order.

    ``on_start`` and ``on_done`` hear of each port as it starts and ends (for a
    progress bar). A port no report came back for (the run stopped first) is
    an error outcome; a pytest run that broke down raises.
    """
    if options.workers > 1 and len(entries) > 1 and find_spec("xdist") is None:
        raise MmportError(
            "--workers N runs the ports on pytest-xdist, which is not installed; "
            "pip install pytest-xdist, or pass --workers 1"
        )
    listener = _Listener(on_start or _ignore, on_done or _ignore)
    output = io.StringIO()
    with (
        _without_env("PYTEST_ADDOPTS"),
        redirect_stdout(output),
        redirect_stderr(output),
    ):
        code = pytest.main(
            pytest_args(manifest, options, len(entries)), plugins=[listener]
        )
    if listener.interrupted:
        raise KeyboardInterrupt
    if code in BROKEN_RUN:
        raise RuntimeError(
            f"pytest stopped ({pytest.ExitCode(code).name}): {_last_line(output)}"
        )
    return [
        listener.outcomes.get(name)
        or PortOutcome.unverified(
            entry, 3, "not verified: the pytest run ended before this port's turn"
        )
        for name, entry in port_names(entries).items()
    ]


class _Listener:
    """A pytest plugin on the controller: hears each port start and end, and keeps the outcomes."""

    def __init__(
        self,
        on_start: Callable[[ManifestEntry], None],
        on_done: Callable[[PortOutcome], None],
    ) -> None:
        self.on_start, self.on_done = on_start, on_done
        self.started: set[str] = set()
        self.outcomes: dict[str, PortOutcome] = {}
        self.interrupted = False
        self.config: pytest.Config | None = None
        self.manifest_plugin: ManifestPlugin | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        """Keep the config: the manifest's plugin is looked up in it once it is registered."""
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """A port starts with its first check (a node id is MANIFEST::PORT::CHECK)."""
        port = "::".join(nodeid.split("::")[1:-1])
        named = self._plugin().named
        if port in named and port not in self.started:
            self.started.add(port)
            self.on_start(named[port])

    @pytest.hookimpl(trylast=True)  # after ManifestPlugin kept the outcome
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A port is done when the report carrying its outcome arrives."""
        port = dict(report.user_properties).get(PORT_PROPERTY)
        if getattr(report, OUTCOME_ATTRIBUTE, None) is not None and isinstance(
            port, str
        ):
            outcome = self.outcomes[port] = self._plugin().outcomes[port]
            self.on_done(outcome)

    def pytest_keyboard_interrupt(self) -> None:
        """Ctrl-C: pytest ends the session; the command then stops as on any Ctrl-C."""
        self.interrupted = True

    def _plugin(self) -> ManifestPlugin:
        """The manifest's plugin, registered by mmport.pytest_plugin's pytest_configure."""
        if self.manifest_plugin is None:
            assert self.config is not None, "pytest configures plugins before any test"
            plugin = self.config.pluginmanager.get_plugin(ManifestPlugin.NAME)
            assert isinstance(plugin, ManifestPlugin), "the manifest is configured"
            self.manifest_plugin = plugin
        return self.manifest_plugin


def _ignore(_: object) -> None:
    pass


@contextmanager
def _without_env(name: str) -> Iterator[None]:
    """``name`` out of the environment for the block (a user's PYTEST_ADDOPTS is for their tests, not for mmport's)."""
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


def _last_line(output: io.StringIO) -> str:
    lines = output.getvalue().strip().splitlines()
    return lines[-1] if lines else "no output"
