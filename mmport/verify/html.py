"""``verify --html``: one self-contained page a reviewer opens to see why a port fails.

The page holds, in order: the verdict (pass, fail or cannot judge) and how
verify ran; the first difference, named in one line; the checks; what could
not be judged, and why (what the snapshot lacks); when verify swept item sizes
(``verify_port(..., curves=True)``), per modality a plot of HF's count and
the port's against the item's size; each failing check's failures, token
failures with HF's and the port's tokens side by side around the first
difference; and each failing probe's items and sizes. It loads nothing: CSS and SVG are
inline, and every value from the report is escaped::

    Path("report.html").write_text(render_html(verify_port("llava", port, curves=True)))
"""

from __future__ import annotations

from html import escape

from mmport import __version__
from mmport.verify.report import CountCurve, Failure, ItemSize, Report, TokenWindow
from mmport.verify.svgplot import panel

__all__ = ["render_html"]

# Token windows shown open; the rest are folded (a port off by one fails every probe alike).
OPEN_WINDOWS = 1

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328; margin: 0; background: #f6f8fa; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 40px; background: #fff; min-height: 100vh; }
h1 { font-size: 22px; margin: 0 0 6px; } h1 code { font-size: 20px; } h2 { font-size: 17px; margin: 28px 0 10px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; } h3 code { font-size: 14px; } code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: 12.5px; }
.verdict { display: inline-block; font-weight: 700; padding: 2px 12px; border-radius: 12px; color: #fff; margin-left: 10px; font-size: 15px; vertical-align: 3px; }
.verdict.pass, .status.pass { background: #1a7f37; } .verdict.fail, .status.fail { background: #cf222e; } .status.skip { background: #9a6700; }
.verdict.cannot_judge, .status.cannot_judge { background: #8250df; }
.severity { color: #59636e; font-size: 12px; } .severity.loud { color: #9a6700; } .severity.silent { color: #cf222e; font-weight: 600; }
.status { color: #fff; border-radius: 10px; padding: 1px 9px; font-size: 12px; font-weight: 600; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 12px 0 0; }
dl.meta dt { color: #59636e; } dl.meta dd { margin: 0; }
.first-diff { border-left: 4px solid #cf222e; background: #fff5f5; padding: 10px 14px; margin-top: 18px; }
.first-diff strong { color: #cf222e; }
table { border-collapse: collapse; } th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #eaeef2; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; } td.num { text-align: right; }
table.window td { padding: 1px 10px; } table.window .sep { border-left: 2px solid #d0d7de; }
tr.differ td { background: #fff1e5; } tr.first td { background: #ffd8d8; font-weight: 700; }
ul.failures { padding-left: 20px; } ul.failures li { margin: 3px 0; }
details { margin: 8px 0 14px; } summary { cursor: pointer; font-weight: 600; }
.panels { display: flex; flex-wrap: wrap; gap: 12px; }
.count-plot text { font: 11px system-ui, sans-serif; fill: #59636e; } .count-plot .panel-title { font-weight: 700; fill: #1f2328; font-size: 12px; }
.agree { color: #1a7f37; } .disagree { color: #cf222e; font-weight: 600; }
footer { margin-top: 36px; color: #59636e; font-size: 12px; }
"""


def render_html(report: Report) -> str:
    """The report as one HTML page (a string), self-contained and escaped throughout."""
    verdict = report.verdict.replace("_", " ").upper()
    body = [
        _header(report, verdict),
        _first_difference(report),
        _checks(report),
        _unjudged(report),
        _curves(report),
        _failures(report),
        _failing_probes(report),
        f"<footer>Written by mmport {escape(__version__)} (<code>mmport verify --html</code>).</footer>",
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>mmport verify {escape(report.ref)}: {verdict}</title><style>{CSS}</style></head>\n"
        "<body><main>\n"
        + "\n".join(part for part in body if part)
        + "\n</main></body></html>\n"
    )


def _header(report: Report, verdict: str) -> str:
    settings = "; ".join(
        f"{kwargs} ({modality or 'all'}, {origin})"
        for modality, kwargs, origin in report.settings
    )
    rows = [
        ("port", f"<code>{escape(report.port)}</code>"),
        ("backend", escape(report.backend)),
        ("probes", f"{report.probes} (seed {report.seed})"),
        ("time", f"{report.seconds:.1f} s"),
        (
            "request settings",
            escape(
                settings
                or f"none {'the model takes ' if report.settings_not_applicable else ''}changes HF's counts here: probes ran under the defaults"
            ),
        ),
        *_setting_fits(report),
    ]
    meta = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows)
    return (
        f'<header><h1>mmport verify <code>{escape(report.ref)}</code><span class="verdict {report.verdict}">{verdict}</span></h1>'
        f'<dl class="meta">{meta}</dl></header>'
    )


def _setting_fits(report: Report) -> list[tuple[str, str]]:
    """Header rows for settings the HF model cannot take, and those whose fit could not be told."""
    rows = []
    for label, fits in (
        ("not applicable to this checkpoint", report.settings_not_applicable),
        ("model fit not told", report.settings_undecided),
    ):
        if fits:
            rows.append(
                (
                    label,
                    "<br>".join(
                        f"<code>{escape(f.setting)}</code> ({escape(f.modality)}): {escape(f.reason)}"
                        for f in fits
                    ),
                )
            )
    return rows


def _first_failure(report: Report) -> Failure | None:
    """The failure to name first: a token difference HF and the port can be read at, else any."""
    failures = [f for c in report.checks.values() for f in c.failures]
    return next(
        (f for f in failures if f.probe in report.token_windows),
        failures[0] if failures else None,
    )


def _first_difference(report: Report) -> str:
    failure = _first_failure(report)
    if failure is None:
        return ""
    window = report.token_windows.get(failure.probe)
    items = (
        ", ".join(i.described for i in report.probe_items.get(failure.probe, []))
        or "no items"
    )
    if window is None:
        return f'<section class="first-diff"><strong>First difference:</strong> {escape(failure.describe())}</section>'
    said = (
        f"token position {window.position}: HF {_token(window.hf, window.hf_tokens, window)}, "
        f"port {_token(window.port, window.port_tokens, window)}"
    )
    return (
        f'<section class="first-diff"><strong>First difference:</strong> probe <code>{escape(failure.probe)}</code> '
        f"({escape(items)}), {said}</section>"
    )


def _token(ids: tuple[int, ...], texts: tuple[str, ...], window: TokenWindow) -> str:
    """One side's id at the first difference and its text: ``90 <code>w</code>``, or ``end of prompt``."""
    index = window.position - window.start
    if index >= len(ids):
        return "end of prompt"
    text = f" <code>{escape(texts[index])}</code>" if index < len(texts) else ""
    return f"{ids[index]}{text}"


def _checks(report: Report) -> str:
    rows = []
    for check in report.checks.values():
        shown = check.status.replace("_", " ")
        rows.append(
            f'<tr><td>{escape(check.name)}</td><td><span class="status {check.status}">{shown}</span></td>'
            f'<td class="num">{check.runs}</td><td>{escape(check.detail())}</td></tr>'
        )
    head = "<tr><th>check</th><th>status</th><th>runs</th><th>first failure, or what was measured</th></tr>"
    return f'<section><h2>Checks</h2><table class="checks">{head}{"".join(rows)}</table></section>'


def _failures(report: Report) -> str:
    parts, shown = [], 0
    for check in report.checks.values():
        if not check.failures:
            continue
        parts.append(f"<h3>{escape(check.name)}</h3>")
        parts.append(
            '<ul class="failures">'
            + "".join(_failure_item(f) for f in check.failures)
            + "</ul>"
        )
        if check.name != "tokens":
            continue
        for failure in check.failures:
            window = report.token_windows.get(failure.probe)
            if window is not None:
                parts.append(_window(failure.probe, window, open_=shown < OPEN_WINDOWS))
                shown += 1
    return f"<section><h2>Failures</h2>{''.join(parts)}</section>" if parts else ""


def _failure_item(failure: Failure) -> str:
    """One failure as a list item, its severity (loud or silent; defaults or a setting) marked."""
    severity = (
        f'<span class="severity {failure.loudness}">{escape(failure.severity())}</span>'
    )
    return f"<li>{escape(failure.describe(severity=False))} {severity}</li>"


def _unjudged(report: Report) -> str:
    """Each check that cannot judge, with the probes the snapshot kept from a verdict and what it lacks."""
    parts = []
    for check in report.checks.values():
        if check.status == "cannot_judge":
            parts.append(f"<h3>{escape(check.name)}</h3>")
            parts.append(
                '<ul class="failures">'
                + "".join(f"<li>{escape(u.describe())}</li>" for u in check.unjudged)
                + "</ul>"
            )
    if not parts:
        return ""
    lead = "<p>The port or HF raised because the snapshot lacks what real checkpoints of the family carry: no verdict either way.</p>"
    return f"<section><h2>Cannot judge</h2>{lead}{''.join(parts)}</section>"


def _window(probe: str, window: TokenWindow, open_: bool) -> str:
    """HF's and the port's tokens side by side, the first differing position marked."""
    rows = []
    for position in range(
        window.start, window.start + max(len(window.hf), len(window.port))
    ):
        index = position - window.start
        differ = window.hf[index : index + 1] != window.port[index : index + 1]
        kind = "first" if position == window.position else "differ" if differ else ""
        mark = " ← first difference" if position == window.position else ""
        cells = _cells(window.hf, window.hf_tokens, index, "") + _cells(
            window.port, window.port_tokens, index, "sep"
        )
        rows.append(
            f'<tr class="{kind}"><td class="num mono">{position}{mark}</td>{cells}</tr>'
        )
    head = '<tr><th>position</th><th>HF id</th><th>HF token</th><th class="sep">port id</th><th>port token</th></tr>'
    summary = (
        f"tokens of <code>{escape(probe)}</code> around position {window.position}"
    )
    return f'<details{" open" if open_ else ""}><summary>{summary}</summary><table class="window">{head}{"".join(rows)}</table></details>'


def _cells(ids: tuple[int, ...], texts: tuple[str, ...], index: int, first: str) -> str:
    """An id and its token text as two cells; past the side's end, a dash and ``end of prompt``."""
    if index >= len(ids):
        return f'<td class="mono {first}">—</td><td>end of prompt</td>'
    text = escape(texts[index]) if index < len(texts) else ""
    return f'<td class="mono num {first}">{ids[index]}</td><td class="mono">{text}</td>'


def _failing_probes(report: Report) -> str:
    failing = dict.fromkeys(
        f.probe
        for c in report.checks.values()
        for f in c.failures
        if f.probe in report.probe_items
    )
    if not failing:
        return ""
    parts = ["<section><h2>Failing probes</h2>"]
    for probe in failing:
        parts.append(
            f"<h3><code>{escape(probe)}</code></h3><p>{escape(report.probe_cases.get(probe, ''))}</p>"
        )
        parts.append(_items(report.probe_items[probe]))
    return "".join(parts) + "</section>"


# The item table's columns: (heading, the modalities it applies to, the cell).
ITEM_COLUMNS = (
    ("width × height", ("image", "video"), lambda i: f"{i.width} × {i.height}"),
    ("frames", ("video",), lambda i: str(i.frames)),
    ("fps", ("video",), lambda i: f"{i.fps:g}"),
    ("seconds", ("audio",), lambda i: f"{i.seconds:g}"),
)


def _items(items: list[ItemSize]) -> str:
    """A probe's items, one row each, with the columns its modalities have."""
    if not items:
        return "<p>No items: text only.</p>"
    present = {item.modality for item in items}
    columns = [c for c in ITEM_COLUMNS if present & set(c[1])]
    head = (
        "<tr><th>#</th><th>modality</th>"
        + "".join(f"<th>{name}</th>" for name, _, _ in columns)
        + "</tr>"
    )
    rows = []
    for index, item in enumerate(items):
        cells = [
            cell(item) if item.modality in applies else "—"
            for _, applies, cell in columns
        ]
        rows.append(
            f"<tr><td>{index}</td><td>{escape(item.modality)}</td>"
            + "".join(f"<td>{c}</td>" for c in cells)
            + "</tr>"
        )
    return f'<table class="items">{head}{"".join(rows)}</table>'


def _curves(report: Report) -> str:
    if not report.curves:
        return ""
    parts = [
        "<section><h2>Count against item size</h2>",
        "<p>Each item processed alone: HF's embedding positions and the port's placeholder's.</p>",
    ]
    for modality, curve in report.curves.items():
        parts.append(f"<h3>{escape(modality)}</h3>{_agreement(curve)}")
        groups = dict.fromkeys(p.group for p in curve.points)
        panels = [
            panel(
                g, [p for p in curve.points if p.group == g], curve.x_label, curve.log_x
            )
            for g in groups
        ]
        parts.append(f'<div class="panels">{"".join(panels)}</div>')
    return "".join(parts) + "</section>"


def _agreement(curve: CountCurve) -> str:
    """One line: do HF and the port agree, and where first they do not."""
    if not curve.points:
        return "<p>HF rejects every item of the sweep: nothing to plot.</p>"
    wrong = curve.mismatches()
    if not wrong:
        return f'<p class="agree">HF and the port agree at all {len(curve.points)} sizes.</p>'
    first = wrong[0]
    port = first.port if first.port is not None else f"raises {first.error}"
    said = f"the port differs from HF at {len(wrong)} of {len(curve.points)} sizes; first at {first.item}: HF {first.hf}, port {port}"
    return f'<p class="disagree">{escape(said)}</p>'
