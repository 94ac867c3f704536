"""The collection tree of a manifest: manifest → port → check.

A :class:`PortCollector` verifies its port once, in its ``setup`` (pytest
sets a collector up before its first item runs, and keeps it until its last
item is done); each :class:`CheckItem` then reads its own check from that
one :class:`~mmport.verify.Report`:

======================  ==========================================================
check status            pytest outcome
======================  ==========================================================
``pass``                passed
``fail``                failed; the report shows the check's failures, first difference first
``skip``                skipped, with the reason (``model``/``serve`` unless asked for)
``cannot_judge``        skipped, reason ``cannot judge: the snapshot lacks ...``
======================  ==========================================================

``cannot judge`` is a skip rather than an xfail: an xfail says a failure was
expected, while here no verdict exists either way (the snapshot, not the port,
is short). A port that cannot be verified at all (bad input: exit code 2 of
``mmport verify``) errors every one of its items with mmport's one-line
message; so does a port a pytest-xdist worker died on (:mod:`mmport.testing.worker`).

Whatever happened, the collector keeps it as a
:class:`~mmport.manifest.outcome.PortOutcome`, which the plugin ships with the
port's first report to pytest's controller (``mmport verify --manifest``
builds its table, JSON and HTML from those).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    from mmport.manifest import ManifestEntry
    from mmport.manifest.outcome import PortOutcome
    from mmport.testing.plugin import ManifestPlugin
    from mmport.verify import CheckResult, Report

__all__ = [
    "PORT_PROPERTY",
    "CheckFailed",
    "CheckItem",
    "ManifestDirectory",
    "ManifestFile",
    "PortCollector",
]

# The user property naming each item's port: timings are summed per port from it (under xdist too).
PORT_PROPERTY = "mmport_port"
# Failures listed under a failing check's first difference; the rest are counted.
SHOWN_FAILURES = 5


class ManifestFile(pytest.File):
    """A ``pyproject.toml`` manifest: one :class:`PortCollector` per port of this run's shard."""

    def __init__(self, *, plugin: ManifestPlugin, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plugin = plugin

    def collect(self) -> Iterator[PortCollector]:
        """The ports, in the manifest's order."""
        return _port_collectors(self, self.plugin)


class ManifestDirectory(pytest.Directory):
    """A directory of generated ports given as the manifest: its ports instead of its Python files."""

    def __init__(self, *, plugin: ManifestPlugin, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plugin = plugin

    def collect(self) -> Iterator[PortCollector]:
        """The ports, in the order of their paths."""
        return _port_collectors(self, self.plugin)


class PortCollector(pytest.Collector):
    """One port of the manifest: its checks as items, verified once for all of them."""

    def __init__(
        self, *, entry: ManifestEntry, plugin: ManifestPlugin, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.entry = entry
        self.plugin = plugin
        self.report: Report | None = None
        # Set by setup; the plugin takes it once, for the port's first report.
        self.outcome: PortOutcome | None = None
        # ``-k llava`` selects a port by its ref too, not only by its path.
        self.extra_keyword_matches.add(_ref_keyword(entry.ref))
        self.add_marker("mmport")

    def collect(self) -> Iterator[CheckItem]:
        """One item per check verify reports, in the report's order."""
        from mmport.verify.report import CHECKS

        for check in CHECKS:
            yield CheckItem.from_parent(self, name=check)

    def setup(self) -> None:
        """Verify the port (once: its items read the report); one mmport cannot verify fails every item with mmport's message."""
        from mmport.errors import MmportError, one_line
        from mmport.manifest.outcome import PortOutcome

        guard = self.plugin.guard
        died = guard.died_on(self.name)
        if died is not None:
            self._refuse(3, died)
        started = time.perf_counter()
        try:
            with guard.watching(self.name):
                self.report = self._verify()
        except MmportError as exc:
            self._refuse(exc.exit_code, str(exc), time.perf_counter() - started)
        except Exception as exc:
            # A bug of mmport's: the port's row says so, and pytest shows the traceback.
            self.outcome = PortOutcome.unverified(
                self.entry,
                3,
                f"internal error: {one_line(exc)}",
                time.perf_counter() - started,
            )
            raise
        self.outcome = PortOutcome.of_report(
            self.entry, self.report, html=self.plugin.html is not None
        )

    def take_outcome(self) -> PortOutcome | None:
        """What verifying the port gave, the first time it is asked for; None after (or before setup)."""
        outcome, self.outcome = self.outcome, None
        return outcome

    def _refuse(self, code: int, error: str, seconds: float = 0.0) -> NoReturn:
        """Keep the outcome of a port that could not be verified, and fail its items with ``error``."""
        from mmport.manifest.outcome import PortOutcome

        self.outcome = PortOutcome.unverified(self.entry, code, error, seconds)
        pytest.fail(
            f"mmport could not verify {self.entry.label} against {self.entry.ref}: {error}",
            pytrace=False,
        )

    def _verify(self) -> Report:
        """``mmport verify REF --port PORT`` with the manifest entry's and the command line's options."""
        from mmport.verify import ModelOptions, verify_port

        option = self.config.getoption
        return verify_port(
            self.entry.ref,
            self.entry.port,
            probes=option("mmport_probes"),
            seed=option("mmport_seed"),
            backend=option("mmport_backend"),
            model=ModelOptions() if self.entry.model else None,
            processor_kwargs=self.entry.processor_kwargs,
            settings_per_modality=option("mmport_settings"),
            trust_remote_code=self.entry.trust_remote_code,
            curves=self.plugin.html is not None,
        )


class CheckFailed(Exception):
    """A check of a port failed; its repr is the check's failures, first difference first."""

    def __init__(self, label: str, ref: str, result: CheckResult) -> None:
        super().__init__(result.detail())
        self.label, self.ref, self.result = label, ref, result

    def describe(self) -> str:
        """The failure as pytest shows it: which port and check, then each failure (the first is the first difference)."""
        failures = self.result.failures
        # The first line is the one pytest's short summary (-ra) keeps.
        lines = [f"first difference: {failures[0].describe()}"]
        lines.append(
            f"the {self.result.name} check of {self.label} (against {self.ref}) failed {len(failures)} time(s):"
        )
        lines += [f"  {failure.describe()}" for failure in failures[:SHOWN_FAILURES]]
        if len(failures) > SHOWN_FAILURES:
            lines.append(
                f"  ... and {len(failures) - SHOWN_FAILURES} more (mmport verify --html shows them all)"
            )
        return "\n".join(lines)


class CheckItem(pytest.Item):
    """One check of one port: passes, fails or skips as the port's report says."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.user_properties.append((PORT_PROPERTY, self.port.name))

    @property
    def port(self) -> PortCollector:
        """The port this check belongs to (its parent node, by construction)."""
        return _port_of(self)

    def runtest(self) -> None:
        """Read this check's status from the port's report."""
        port = self.port
        assert port.report is not None, (
            "the port's setup verified it before any check runs"
        )
        result = port.report.checks[self.name]
        if result.status == "fail":
            raise CheckFailed(port.entry.label, port.entry.ref, result)
        if result.status in ("skip", "cannot_judge"):
            pytest.skip(result.detail() or "no probe exercised this check")

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> Any:
        """mmport's own account of a failed check; a traceback only for a fault of mmport's."""
        if isinstance(excinfo.value, CheckFailed):
            return excinfo.value.describe()
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        """Where the item comes from: the manifest, and the check and port (the heading of its failure).

        Not ``PORT::CHECK``: pytest reads a domain the node id ends with as a
        dotted Python name and would print the port's ``.py`` as ``::py``.
        """
        return self.path, None, f"{self.name} check of {self.port.name}"


def _port_collectors(
    parent: pytest.Collector, plugin: ManifestPlugin
) -> Iterator[PortCollector]:
    """A collector per port this run verifies (this shard's), under ``parent``."""
    for name, entry in plugin.ports():
        yield PortCollector.from_parent(parent, name=name, entry=entry, plugin=plugin)


def _ref_keyword(ref: str) -> str:
    """The word ``-k`` matches a ref by: a model_type or hub id as written, a snapshot directory by its name."""
    return ref.rstrip("/").rsplit("/", 1)[-1]


def _port_of(item: pytest.Item) -> PortCollector:
    """A check item's port collector: every check is collected under one."""
    parent = item.parent
    assert isinstance(parent, PortCollector), (
        "check items are collected under their port"
    )
    return parent
