"""``verify --manifest --html DIR`` (and pytest's ``--mmport-html DIR``): a page per port and an index page that links them.

Each port's page is the single-port report (:func:`mmport.verify.html.render_html`),
rendered where the port was verified (a pytest-xdist worker, say); the index holds the summary table the
terminal shows, each row linking its port's page (a port that never reached a
report, bad input or an error, has its one line in the table instead).
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from mmport import __version__
from mmport.verify.html import CSS

if TYPE_CHECKING:
    from mmport.manifest.outcome import PortOutcome

__all__ = ["page_name", "render_index", "write_html_reports"]

# Verdicts a port's own page never shows: its run stopped before a report.
_OUTCOME_CSS = ".status.bad_input, .status.error { background: #6e7781; }"


def page_name(index: int, label: str) -> str:
    """The file name of a port's page: its place in the manifest and its path, made safe for a file name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "port"
    return f"{index:03d}-{safe}.html"


def render_index(outcomes: list[PortOutcome], pages: list[str | None]) -> str:
    """The index page: one row per port (verdict, failing checks or the error, seconds), linking its page."""
    rows = []
    for outcome, page in zip(outcomes, pages, strict=True):
        label = escape(outcome.entry.label)
        port = f'<a href="{escape(page)}">{label}</a>' if page else label
        detail = (
            ", ".join(outcome.failing)
            if outcome.failing
            else outcome.error or "; ".join(outcome.unjudged)
        )
        verdict = outcome.verdict
        badge = (
            f'<span class="status {verdict.replace(" ", "_")}">{escape(verdict)}</span>'
        )
        rows.append(
            f"<tr><td>{port}</td><td>{escape(outcome.entry.ref)}</td><td>{badge}</td>"
            f"<td>{escape(detail)}</td><td>{outcome.seconds:.1f}</td></tr>"
        )
    passed = sum(o.verdict == "pass" for o in outcomes)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>mmport verify: {passed} / {len(outcomes)} ports pass</title><style>{CSS}{_OUTCOME_CSS}</style></head>\n"
        f"<body><main>\n<h1>mmport verify: {passed} / {len(outcomes)} ports pass</h1>\n"
        "<table><thead><tr><th>port</th><th>ref</th><th>verdict</th><th>failing checks, or the error</th>"
        "<th>seconds</th></tr></thead><tbody>\n"
        + "\n".join(rows)
        + "\n</tbody></table>\n"
        f"<footer>Written by mmport {escape(__version__)} (<code>mmport verify --manifest --html</code>).</footer>\n"
        "</main></body></html>\n"
    )


def write_html_reports(outcomes: list[PortOutcome], directory: Path) -> Path:
    """Write each port's page and ``index.html`` into ``directory`` (made if absent); the index's path."""
    directory.mkdir(parents=True, exist_ok=True)
    pages: list[str | None] = []
    for index, outcome in enumerate(outcomes):
        if not outcome.report_html:
            pages.append(None)
            continue
        name = page_name(index, outcome.entry.label)
        (directory / name).write_text(outcome.report_html)
        pages.append(name)
    index_path = directory / "index.html"
    index_path.write_text(render_index(outcomes, pages))
    return index_path
