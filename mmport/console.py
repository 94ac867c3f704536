"""The one place that prints: a rich console and mmport's table layouts."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = [
    "console",
    "err_console",
    "error",
    "manifest_table",
    "progress_console",
    "report_table",
    "spec_table",
    "static_table",
]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


# How an item's HF output follows from its original size (mmport.analyzers.itemreads).
# What each kind of per-item output read (mmport.analyzers.itemreads) becomes in the port.
ITEM_READS = {
    "size": "the item's (height, width) before resizing",
    "patches": "its .prod() = get_number_of_image_patches(height, width)",
    "grid": "(1, *get_number_of_image_patches(height, width))",
    "item": "one element of get_number_of_image_patches(height, width)",
    "count": "get_number_of_image_patches(height, width)",
    "part": "get_number_of_image_patches(height, width) less the count it starts from",
    "constant": "a constant while a switch is off; under it, HF's preprocessing of an image of its size",
    "resized": "the size after HF's resize, as _get_num_multimodal_tokens computes it",
    "tokens": "the token count _get_num_multimodal_tokens computes",
    "entry": "the entry _get_num_multimodal_tokens hands the hook for one image",
}


@contextmanager
def progress_console() -> Iterator[Console]:
    """A console on a copy of stderr's file descriptor, for a progress bar drawn while pytest runs tests.

    pytest captures a test's output by pointing descriptor 2 elsewhere while the
    test runs; a copy made before still reaches the terminal. Where stderr has
    no descriptor (a test's in-process runner), the plain :data:`err_console`.
    """
    try:
        descriptor = sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both
        yield err_console
        return
    with os.fdopen(os.dup(descriptor), "w", buffering=1) as stream:
        yield Console(file=stream, highlight=False)


def error(message: str) -> None:
    """One red line on stderr, for a user mistake (no traceback)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


def _suffix(update) -> str:
    """What the HF processor appends to every prompt, for the inspect table."""
    parts = [repr(update.prompt_suffix)] if update.prompt_suffix else []
    return " + ".join([*parts, *update.suffix_tokens]) or "none"


def _prefix_rows(prefix) -> list[tuple[str, str, str]]:
    """The text HF puts before each item, numbered by its index, and when it does."""
    if prefix is None:
        return [("item prefix", "none", "")]
    rows = [("item prefix", prefix.text, str(prefix.source))]
    if prefix.condition:
        rows.append(
            (
                "item prefix while",
                "\n".join([*prefix.setup, f"→ {prefix.condition}"]),
                str(prefix.condition_source),
            )
        )
    return rows


def _prefix(update) -> str:
    """The token the HF processor puts before every prompt's text, for the inspect table."""
    prefix = update.prefix
    if prefix is None:
        return "none"
    when = {"": "", "starts_with": ", unless the prompt starts with it"}[prefix.unless]
    return (
        " or ".join(prefix.tokens)
        + when
        + (" (with special tokens)" if prefix.only_with_special_tokens else "")
    )


def spec_table(spec) -> Table:
    """The facts of a PortSpec with their HF sources."""
    table = Table(
        title=f"{spec.architecture or spec.model_type} ({spec.processor_class})",
        show_lines=False,
    )
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    table.add_column("HF source", overflow="fold")
    rows = [
        *_entry_rows(spec.entry),
        *(
            row
            for m in spec.modalities
            for row in (_image_rows(m) if m.modality == "image" else _media_rows(m))
        ),
        *_encoder_rows(spec),
    ]
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    for note in spec.notes:
        table.add_row("note", escape(note), "")
    return table


def _image_rows(m) -> list[tuple[str, str, str]]:
    """The image side: its placeholder and count, how the prompt changes, its fields and limits."""
    return [
        ("modality", m.modality, ""),
        ("placeholder", repr(m.placeholder), str(m.placeholder_source)),
        ("token id", f"{m.token_attr} = {m.token_id}", str(m.token_source)),
        (
            "count rule",
            "\n".join([*m.count.statements, f"→ {m.count.result}"]),
            str(m.count.source),
        ),
        ("count strategy", _strategy(m.count.strategy, m.count.reason), ""),
        *[
            (f"item {key}", ITEM_READS[kind], str(source))
            for key, kind, source in m.count.item_reads
        ],
        *[("transplanted", h.owner or h.name, str(h.source)) for h in m.count.helpers],
        (
            "item geometry",
            m.geometry.size_expr or "not used",
            str(m.geometry.source or ""),
        ),
        *_update_rows(m.update),
        *_field_rows(m),
        (
            "images need text",
            "yes (port passes placeholders to HF)" if m.needs_text else "no",
            "",
        ),
        (
            "prompt for an image",
            "written by HF (a request carries it and one image)"
            if m.own_prompt_source
            else "the user's",
            str(m.own_prompt_source or ""),
        ),
        *_self_handled_rows(m.self_handled),
        *_setting_rows(m),
        ("mm limit", "unlimited" if m.limit is None else str(m.limit), ""),
        ("worst-case size (h, w)", str(m.worst_case_size), ""),
    ]


def _self_handled_rows(handled) -> list[tuple[str, str, str]]:
    """A processor that handles images itself: how it is called, and up to how many images it processes each as alone."""
    if handled is None:
        return []
    alone = (
        "any number probed"
        if handled.alone_up_to is None
        else f"at most {handled.alone_up_to} a prompt (observed); the port skips vLLM's "
        "processor cache past it and hashes such images apart"
    )
    return [
        (
            "images handled by",
            f"its own __call__({handled.text_parameter}=..., images=...), no image processor; "
            f"images={handled.no_images} without images",
            str(handled.source),
        ),
        ("images processed as alone", alone, str(handled.items_source or "")),
    ]


def _strategy(strategy: str, reason: str) -> str:
    """``delegated (why)``, or the strategy alone where there is no reason."""
    return strategy + (f" ({reason})" if reason else "")


def _update_rows(update) -> list[tuple[str, str, str]]:
    """How HF changes the prompt around an image: the update, its tokens, prefix and suffix."""
    return [
        ("prompt update", f"{update.mode} at {update.target}", str(update.source)),
        (
            "non-embedding tokens",
            ", ".join(update.trailing_tokens) or "none",
            str(update.source) if update.trailing_tokens else "",
        ),
        (
            "prompt prefix",
            _prefix(update),
            str(update.prefix.source) if update.prefix else "",
        ),
        ("prompt suffix", _suffix(update), str(update.suffix_source or "")),
        *_prefix_rows(update.item_prefix),
        (
            "special tokens in prompt",
            "yes" if update.add_special_tokens else "no (HF places BOS itself)",
            str(update.special_tokens_source or ""),
        ),
    ]


def _field_rows(m) -> list[tuple[str, str, str]]:
    """Each field's layout, the outputs renamed apart from another modality's, and how the fields were found."""
    return [
        *[
            (
                f"field {f.key}",
                " ".join(filter(None, (f.layout, f.sizes))),
                str(f.source),
            )
            for f in m.fields
        ],
        *[("renamed output", f"{old} → {new}", "") for old, new in m.renamed_keys],
        ("fields strategy", _strategy(m.fields_strategy, m.fields_reason), ""),
    ]


def _media_rows(m) -> list[tuple[str, str, str]]:
    """The video or audio side: its placeholder, how its replacement is computed, its fields."""
    count, outputs = m.count, m.count.outputs
    rule, reads = _media_replacement(m)
    embed = (
        f"{m.embed_token_owner}.{m.embed_token_attr}"
        if m.embed_token_attr
        else "the placeholder's own"
    )
    return [
        ("modality", m.modality, ""),
        ("placeholder", repr(m.placeholder), str(m.placeholder_source)),
        ("token id", f"{m.token_attr} = {m.token_id}", str(m.token_source)),
        ("embedding token", embed, str(m.embed_token_source or "")),
        ("replacement", rule, str(count.source)),
        ("count strategy", _strategy(count.strategy, count.reason), ""),
        *(
            [("prompt update", f"insert at {m.update.target}", str(m.update.source))]
            if m.update.mode == "insert"
            else []
        ),
        *[("hook reads", read, "") for read in reads],
        *(
            [
                (
                    "hook completed by",
                    outputs.completion.owner,
                    str(outputs.completion.source),
                )
            ]
            if outputs and outputs.completion
            else []
        ),
        *[("transplanted", h.owner or h.name, str(h.source)) for h in count.helpers],
        *_field_rows(m),
        (
            "needs text",
            "yes (port passes placeholders to HF)" if m.needs_text else "no",
            "",
        ),
        *_media_call_rows(m),
        *_self_handled_rows(m.self_handled),
        *_setting_rows(m),
        ("mm limit", "unlimited" if m.limit is None else str(m.limit), ""),
    ]


def _media_replacement(m) -> tuple[str, list[str]]:
    """How a video's or audio's replacement is computed, and what the hook reads for it."""
    count, outputs = m.count, m.count.outputs
    if outputs is not None:
        reads = [
            *(f"output {k}" for k in outputs.reads),
            *(["video metadata"] if outputs.reads_metadata else []),
        ]
        return f"{outputs.hook.name}(processor, the item's HF outputs, 0)", reads
    if count.strategy == "derived":
        return f"→ {count.result} (a block HF's __call__ builds)", []
    process = "audio" if m.modality == "audio" else m.modality + "s"
    return f"HF's _process_{process} on the item", []


def _media_call_rows(m) -> list[tuple[str, str, str]]:
    """What HF's call of a video or audio takes: its parameter, the sub-processor's part, the metadata, changing frames."""
    parameter = m.call_parameter
    rows = []
    if parameter:
        rows.append(("HF takes items as", f"{parameter.name}=", str(parameter.source)))
    if parameter and not parameter.forwards_settings:
        rows.append(
            ("sub-processor gets", "the items alone", str(parameter.call_source))
        )
    if m.needs_metadata:
        metadata = "kept beside the frames (vLLM's video_needs_metadata)"
        rows.append(("video metadata", metadata, ""))
    if m.follows_content:
        changing = "yes (dummy frames change from frame to frame)"
        rows.append(("count follows content", changing, ""))
    return rows


def _setting_rows(m) -> list[tuple[str, str, str]]:
    """The request settings (``mm_processor_kwargs``) the count reads: where read, where typed."""
    switches = [
        (
            f"switch {s.name}",
            f"followed: {s.how}" if s.followed else f"refused ({s.how})",
            str(s.read_at),
        )
        for s in m.switches
    ]
    if m.count.strategy == "delegated":
        return [
            (
                "count-changing settings",
                "every setting (HF counts each item under the request's kwargs)",
                "",
            ),
            *switches,
        ]
    rows = (
        []
        if m.settings
        else [
            (
                "count-changing settings",
                "none of the typed call kwargs is read by the count",
                "",
            )
        ]
    )
    if m.count.outputs is not None:
        rows.append(
            (
                "settings via HF's outputs",
                "the count reads HF's outputs for the item, computed under the request's kwargs",
                "",
            )
        )
    for s in m.settings:
        how = (
            f"folded into {s.folded_into}, read at {s.read_at}"
            if s.folded_into
            else f"read at {s.read_at}"
        )
        rows.append(
            (
                f"setting {s.name}",
                how,
                f"typed at {s.declared_at}" if s.declared_at else "",
            )
        )
    rows += switches
    for s in m.counted_by_hf:
        rows.append(
            (
                f"setting {s.name} counted by HF",
                "HF sizes items by it; the derived count does not read it",
                str(s.read_at),
            )
        )
    return rows


def _entry_rows(entry) -> list[tuple[str, str, str]]:
    """A processor called by a method of its own: the method and what it does to the prompt."""
    if entry is None:
        return []
    return [
        (
            "entry point",
            f"{entry.method}(text=..., images=...), not __call__",
            str(entry.source),
        ),
        (
            "prompt format (every prompt)",
            repr(entry.before + "{text}" + entry.after),
            ", ".join(str(s) for s in entry.format_sources),
        ),
        (
            "token put first",
            ", else ".join(entry.prepended),
            str(entry.prepended_source),
        ),
        ("images inserted", "after the token put first", str(entry.items_source)),
        (
            "embedding token",
            f"{entry.embed_token} (HF writes it most for an image)",
            "",
        ),
        ("image fields", ", ".join(entry.fields) + " (rows laid end to end)", ""),
        ("count strategy", f"delegated to HF's {entry.method} on the one image", ""),
    ]


def _feature_path(hf_class: str, path) -> str:
    """What runs for a modality: HF's method, the lines of ``forward`` that compute
    its features, or another modality's path it is handed to the model as."""
    if path.inline is not None:
        lines = len(path.inline.lines)
        return f"{hf_class}.forward, its {lines} lines that compute the features it places (written as {path.method})"
    if path.through:
        return f"{hf_class}.{path.method}, as {path.through} inputs under HF's names"
    return f"{hf_class}.{path.method}"


def _encoder_rows(spec) -> list[tuple[str, str, str]]:
    """The model side: HF's feature path, the modules it reads, the language model."""
    language = spec.language
    language_rows = (
        [
            (
                "language architecture",
                language.architecture or f"none known: {language.unbuildable}",
                language.reason,
            )
        ]
        if language.architecture or language.unbuildable
        else []
    )
    e = spec.encoder
    if e is None:
        return [
            ("encoder path", f"not derived ({spec.encoder_reason})", ""),
            *language_rows,
        ]
    return [
        *[
            (f"{p.modality} feature path", _feature_path(e.hf_class, p), str(p.source))
            for p in e.paths
        ],
        *[
            (f"{modality} feature path", f"not derived ({why})", "")
            for modality, why in e.missing
        ],
        *[
            (f"encoder module {m.attr}", _module_built(m), str(m.source))
            for m in e.modules
        ],
        *[
            (f"borrowed method {name}", f"{e.hf_class}.{name}", "")
            for name in e.borrowed_methods
        ],
        (
            "language model",
            f"{e.language_attr} (built from config.text_config)",
            str(e.language_source),
        ),
        ("weights prefix", f"{e.outer_attr}." if e.outer_attr else "(top level)", ""),
        *language_rows,
        *vllm_code_rows(spec),
    ]


def vllm_code_rows(spec) -> list[tuple[str, str, str]]:
    """Whether the model class is written as vLLM code, each substitution with its HF line, or why not."""
    plan = spec.vllm_model
    if plan is None:
        return [
            ("model class", f"HF's feature paths run ({spec.vllm_model_reason})", "")
        ]
    rows = []
    for path in plan.paths:
        tower = plan.tower(path.tower)
        reads = f"layers {path.layers}" if path.layers else "its output"
        cls = (
            "drops CLS" if path.strategy == '"default"' else f"strategy {path.strategy}"
        )
        call = f"{tower.owner} {tower.class_name}({path.tower_input}), {reads}" + (
            f", {cls}" if path.strategy else ""
        )
        if tower.kept:
            call = f"HF's lines of {path.method} copied, on {tower.owner} {tower.class_name} ({tower.kept})"
        elif path.copied is not None:
            copied = path.copied
            kept = [m.name for m in copied.methods] + [h.name for h in copied.helpers]
            call = f"HF's {path.method} copied with its tower block as {call}" + (
                f"; with {', '.join(kept)}" if kept else ""
            )
        rows.append(
            (
                f"{path.modality} path as vLLM code",
                call + "".join(f" -> {step}" for step in path.steps),
                ", ".join(str(line) for line in path.lines),
            )
        )
    rows += [
        (
            f"projector {p.attr}",
            p.summary,
            str(p.source),
        )
        for p in plan.projectors
    ]
    if plan.rope is not None:
        names = ", ".join(m.name for m in plan.rope.methods)
        rows.append(
            ("M-RoPE positions", f"HF's code copied: {names}", str(plan.rope.source))
        )
    rows.append(("weights by name", f"{len(plan.mapper)} prefixes, every layout", ""))
    return rows


def _module_built(module) -> str:
    """How the port builds an encoder module: HF's line, or vLLM's own module, and why."""
    if module.native is not None:
        return f"vLLM's {module.vllm_class[1]} (in place of {module.code}; it answers HF's calls)"
    if module.vllm_equivalent:
        return f"{module.code} (vLLM's {module.vllm_class[1]} not built: {module.kept})"
    return module.code


def static_table(report) -> Table:
    """What a static read of a remote-code snapshot settled, and what it could not."""
    table = Table(title=f"{report.model_type} (remote code, read without running it)")
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for fact in report.facts:
        table.add_row(
            escape(fact.fact), escape(fact.value), escape(str(fact.source or ""))
        )
    for unsettled in report.unsettled:
        table.add_row(
            "not settled",
            escape(unsettled),
            "needs the snapshot's code to run: --trust-remote-code",
        )
    read = (
        [f"the snapshot's own modules: {', '.join(report.modules)}"]
        if report.modules
        else []
    )
    read += [f"--processor-code: {', '.join(report.outside)}"] if report.outside else []
    table.caption = f"{'; '.join(read)}; none of them was run"
    return table


def report_table(report) -> Table:
    """One row per check: status, probes run, first failure (or why it cannot judge)."""
    colours = {
        "pass": "green",
        "fail": "red",
        "skip": "yellow",
        "cannot_judge": "magenta",
    }
    table = Table(title=f"mmport verify {report.ref} — {report.backend}")
    table.add_column("check")
    table.add_column("status")
    table.add_column("runs", justify="right")
    table.add_column("first failure, or what was measured", overflow="fold")
    for check in report.checks.values():
        status = check.status
        shown = status.replace("_", " ")
        table.add_row(
            check.name,
            f"[{colours[status]}]{shown}[/]",
            str(check.runs),
            escape(check.detail()),
        )
    table.caption = escape(
        " | ".join([_settings_caption(report), *_setting_fit_lines(report)])
    )
    return table


def _settings_caption(report) -> str:
    """The request settings the probes also ran under, in words."""
    if report.settings:
        under = "; ".join(
            f"{kwargs} ({modality or 'all'}, {origin})"
            for modality, kwargs, origin in report.settings
        )
        return f"probes also ran under request settings: {under}"
    if not report.settings_sought:
        return "probes ran under the defaults only (--settings 0)"
    if report.settings_not_applicable:
        return "no request setting the model takes changes HF's counts here: probes ran under the defaults"
    return "no request setting changes HF's counts here: probes ran under the defaults"


def _setting_fit_lines(report) -> list[str]:
    """Settings the HF model cannot take (not judged), and those whose fit could not be told (judged), with reasons."""
    lines = []
    if report.settings_not_applicable:
        named = "; ".join(
            f"{f.setting} ({f.modality}): {f.reason}"
            for f in report.settings_not_applicable
        )
        lines.append(f"not applicable to this checkpoint, so not judged: {named}")
    if report.settings_undecided:
        named = "; ".join(
            f"{f.setting} ({f.modality}): {f.reason}" for f in report.settings_undecided
        )
        lines.append(
            f"judged, though whether the model takes them could not be told: {named}"
        )
    return lines


def manifest_table(outcomes, *, workers: int, wall: float) -> Table:
    """One row per port of a ``verify --manifest`` run: verdict, failing checks (or the error, or why it cannot judge), seconds."""
    colours = {
        "pass": "green",
        "fail": "red",
        "bad input": "red",
        "error": "red",
        "cannot judge": "magenta",
    }
    table = Table(title=f"mmport verify: {len(outcomes)} ports")
    table.add_column("port", overflow="fold")
    table.add_column("ref", overflow="fold")
    table.add_column("verdict")
    table.add_column("failing checks, or the error", overflow="fold")
    table.add_column("seconds", justify="right")
    for o in outcomes:
        detail = ", ".join(o.failing) if o.failing else o.error or "; ".join(o.unjudged)
        table.add_row(
            escape(o.entry.label),
            escape(o.entry.ref),
            f"[{colours[o.verdict]}]{o.verdict}[/]",
            escape(detail),
            f"{o.seconds:.1f}",
        )
    passed = sum(o.verdict == "pass" for o in outcomes)
    own = sum(o.seconds for o in outcomes)
    table.caption = f"{passed} / {len(outcomes)} pass; {wall:.1f} s wall on {workers} worker(s), {own:.1f} s of verify in all"
    return table
