"""What verifying one manifest entry gave, and what a run of many makes of them.

A :class:`PortOutcome` holds the exit code ``mmport verify REF --port PORT``
would have given on its own, with the port's reports. mmport's pytest plugin
(:mod:`mmport.testing`) builds one per port where the port is verified, ships
it to pytest's controller as plain data (:meth:`PortOutcome.to_data`; under
pytest-xdist it crosses from a worker), and ``mmport verify --manifest``
summarises them::

    outcomes = [PortOutcome.of_report(entry, report) for entry, report in ...]
    exit_code(outcomes)      # 0 all pass, 1 a check failed, 2 bad input, 3 mmport failed, 4 cannot judge
    combined_json(outcomes)  # a list of the ports' JSON reports

This module imports neither torch nor :mod:`mmport.verify` (a report's HTML
page is rendered on demand), so pytest's controller stays light.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mmport.errors import EXIT_CODES, verdict_exit_code, worst_exit_code
from mmport.manifest import ManifestEntry

if TYPE_CHECKING:
    from mmport.verify import Report

__all__ = ["PortOutcome", "combined_json", "exit_code"]


@dataclass
class PortOutcome:
    """What verifying one manifest entry gave: the single-port exit code and its reports."""

    entry: ManifestEntry
    code: int  # 0 pass, 1 a check failed, 2 bad input, 3 mmport failed (or its worker died or hung), 4 cannot judge
    seconds: float
    report_json: str = ""  # Report.to_json(), when verify ran to the end
    report_html: str = ""  # the single-port HTML page, when the run asked for pages
    error: str = ""  # the one line a bad input or a failure of mmport's gave
    failing: list[str] = field(default_factory=list)  # names of the failed checks
    unjudged: list[str] = field(
        default_factory=list
    )  # ``check: what the snapshot lacks``, per check that cannot judge

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, ``bad input``, ``error`` or ``cannot judge``."""
        return EXIT_CODES[self.code]

    @classmethod
    def of_report(
        cls, entry: ManifestEntry, report: Report, *, html: bool = False
    ) -> PortOutcome:
        """The outcome of a port verify ran to the end; with ``html``, its page rendered too."""
        checks = report.checks.values()
        return cls(
            entry,
            verdict_exit_code(report.verdict),
            report.seconds,
            report_json=report.to_json(),
            report_html=_html(report) if html else "",
            failing=[c.name for c in checks if c.status == "fail"],
            unjudged=[
                f"{c.name}: {c.unjudged[0].lacking.describe()}"
                for c in checks
                if c.status == "cannot_judge"
            ],
        )

    @classmethod
    def unverified(
        cls, entry: ManifestEntry, code: int, error: str, seconds: float = 0.0
    ) -> PortOutcome:
        """The outcome of a port verify could not finish: bad input (2), or a failure of mmport's (3)."""
        return cls(entry, code, seconds, error=error.strip())

    def to_data(self) -> dict[str, Any]:
        """Everything but the entry, as JSON-ready data (what travels from a pytest-xdist worker)."""
        data = asdict(self)
        del data["entry"]
        return data

    @classmethod
    def from_data(cls, entry: ManifestEntry, data: dict[str, Any]) -> PortOutcome:
        """The outcome :meth:`to_data` gave, for ``entry``."""
        return cls(entry, **data)


def _html(report: Report) -> str:
    from mmport.verify.html import render_html

    return render_html(report)


def exit_code(outcomes: list[PortOutcome]) -> int:
    """The worst single-port code: an mmport failure (3) over bad input (2) over a failed check (1) over cannot judge (4)."""
    return worst_exit_code(o.code for o in outcomes)


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
