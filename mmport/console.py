"""The one place that prints: a rich console and mmport's table layouts."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["console", "err_console", "error", "spec_table", "report_table"]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def error(message: str) -> None:
    """One red line on stderr, for a user mistake (no traceback)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


def _suffix(update) -> str:
    """What the HF processor appends to every prompt, for the inspect table."""
    parts = [repr(update.prompt_suffix)] if update.prompt_suffix else []
    return " + ".join([*parts, *update.suffix_tokens]) or "none"


def spec_table(spec) -> Table:
    """The facts of a PortSpec with their HF sources."""
    table = Table(title=f"{spec.architecture or spec.model_type} ({spec.processor_class})", show_lines=False)
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    table.add_column("HF source", overflow="fold")
    for m in spec.modalities:
        update = m.update
        rows = [
            ("modality", m.modality, ""),
            ("placeholder", repr(m.placeholder), str(m.placeholder_source)),
            ("token id", f"{m.token_attr} = {m.token_id}", str(m.token_source)),
            ("count rule", "\n".join([*m.count.statements, f"→ {m.count.result}"]), str(m.count.source)),
            ("count strategy", m.count.strategy + (f" ({m.count.reason})" if m.count.reason else ""), ""),
            ("item geometry", m.geometry.size_expr or "not used", str(m.geometry.source or "")),
            ("prompt update", f"{update.mode} at {update.target}", str(update.source)),
            ("non-embedding tokens", ", ".join(update.trailing_tokens) or "none", str(update.source) if update.trailing_tokens else ""),
            ("prompt suffix", _suffix(update), str(update.suffix_source or "")),
            ("special tokens in prompt", "yes" if update.add_special_tokens else "no (HF places BOS itself)", str(update.special_tokens_source or "")),
            *[(f"field {f.key}", " ".join(filter(None, (f.layout, f.sizes))), str(f.source)) for f in m.fields],
            ("fields strategy", m.fields_strategy + (f" ({m.fields_reason})" if m.fields_reason else ""), ""),
            ("images need text", "yes (port passes placeholders to HF)" if m.needs_text else "no", ""),
            ("mm limit", "unlimited" if m.limit is None else str(m.limit), ""),
            ("worst-case size (h, w)", str(m.worst_case_size), ""),
        ]
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
    return table


def report_table(report) -> Table:
    """One row per check: status, probes run, first failure."""
    colours = {"pass": "green", "fail": "red", "skip": "yellow"}
    table = Table(title=f"mmport verify {report.ref} — {report.backend}")
    table.add_column("check")
    table.add_column("status")
    table.add_column("runs", justify="right")
    table.add_column("first failure", overflow="fold")
    for check in report.checks.values():
        status = check.status
        detail = check.failures[0].describe() if check.failures else check.skipped
        table.add_row(check.name, f"[{colours[status]}]{status}[/]", str(check.runs), escape(detail))
    return table
