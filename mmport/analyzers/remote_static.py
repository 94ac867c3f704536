"""``inspect`` of a snapshot that ships its own code, without running any of it.

Without ``--trust-remote-code`` nothing from the snapshot is imported, so the
analyzers that read live classes cannot run. This reads the snapshot's own
modules with libcst and its JSON configs as text, and reports what those
settle by themselves — the classes ``auto_map`` names, the placeholder tokens
and their defaults, how the processor expands them (the 5.x hooks or its own
``__call__``), the config's token ids, the image/video processor's declared
geometry — each with its file and line; and names what only running the code
settles.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

import libcst as cst

from mmport.analyzers.chatprompt import (
    ChatPromptRule,
    read_chat_prompt,
    read_chat_tiling,
)
from mmport.analyzers.entrypoint import entry_facts
from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.staticread import StaticModule, code_of, walk
from mmport.sources.processor_code import ProcessorCode
from mmport.sources.remote import auto_references, shipped_modules
from mmport.sources.requirements import missing_packages
from mmport.spec import Source

__all__ = ["StaticFact", "StaticReport", "inspect_statically"]

# Facts only the snapshot's code, run, can settle: what `--trust-remote-code` adds.
UNSETTLED = (
    "the token count per item (the count rule and its helpers)",
    "insertion or replacement, and the tokens around each item",
    "the field layout of the processor's outputs",
    "the mm limits and the worst-case item",
    "the request settings that change counts",
)
# For a model that writes its images into the prompt itself (no processor class), what running adds.
CHAT_UNSETTLED = (
    "each image's tile count (the model card's dynamic_preprocess, run with the tiling settings above)",
    "the tokenizer's ids for each item's text, and whether they survive decoding and re-encoding",
)
# Hooks a 5.x processor expands placeholders with (TRANSFORMERS5.md), and the older way.
_HOOKS = (
    "replace_image_token",
    "replace_video_token",
    "replace_audio_token",
    "_get_num_multimodal_tokens",
    "__call__",
)
# Image/video processor attributes that decide an item's geometry.
_GEOMETRY = (
    "size",
    "crop_size",
    "patch_size",
    "merge_size",
    "temporal_patch_size",
    "max_pixels",
    "min_pixels",
    "image_seq_length",
    "do_resize",
    "do_center_crop",
    "do_image_splitting",
    "max_image_tiles",
)


@dataclass(frozen=True)
class StaticFact:
    """One fact read from the snapshot's files, with where."""

    fact: str
    value: str
    source: Source | None = None


@dataclass(frozen=True)
class StaticReport:
    """What a static read of a remote-code snapshot settles, and what it cannot."""

    model_type: str
    modules: tuple[str, ...]
    facts: tuple[StaticFact, ...]
    unsettled: tuple[str, ...] = UNSETTLED
    outside: tuple[str, ...] = ()  # the module of --processor-code read, if given

    def to_json(self) -> str:
        """The report as JSON (``inspect --json``)."""
        return json.dumps({"static": True, **asdict(self)}, indent=2, default=str)


def _class_facts(
    module: StaticModule, classdef: cst.ClassDef, role: str
) -> list[StaticFact]:
    """The class itself, its class-level settings, hooks and placeholder-token defaults."""
    bases = ", ".join(code_of(b.value) for b in classdef.bases) or "object"
    facts = [
        StaticFact(role, f"{classdef.name.value}({bases})", module.source(classdef))
    ]
    for stmt in classdef.body.body:
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
            stmt.body[0], (cst.Assign, cst.AnnAssign)
        ):
            assign = stmt.body[0]
            targets = (
                [t.target for t in assign.targets]
                if isinstance(assign, cst.Assign)
                else [assign.target]
            )
            names = [t.value for t in targets if isinstance(t, cst.Name)]
            if assign.value is not None and any(
                n.endswith(("_class", "_token")) or n in ("attributes", *_GEOMETRY)
                for n in names
            ):
                facts.append(
                    StaticFact(
                        f"{role} {names[0]}", code_of(assign.value), module.source(stmt)
                    )
                )
        elif isinstance(stmt, cst.FunctionDef) and stmt.name.value in _HOOKS:
            facts.append(
                StaticFact(
                    f"{role} defines",
                    f"{stmt.name.value}(){_replaces_in(stmt)}",
                    module.source(stmt),
                )
            )
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__init__":
            facts += _token_defaults(module, stmt, role)
    return facts


def _replaces_in(function: cst.FunctionDef) -> str:
    """For an old-style ``__call__``: does it expand placeholders by string replacement?"""
    if function.name.value != "__call__":
        return ""
    found = [
        n
        for n in walk(function)
        if isinstance(n, cst.Call)
        and isinstance(n.func, cst.Attribute)
        and n.func.attr.value == "replace"
    ]
    return (
        " — builds the prompt itself, by string replacement"
        if found
        else " — builds the prompt itself"
    )


def _token_defaults(
    module: StaticModule, init: cst.FunctionDef, role: str
) -> list[StaticFact]:
    """Constructor parameters naming placeholder tokens, with their defaults."""
    facts = []
    for param in (*init.params.params, *init.params.kwonly_params):
        name = param.name.value
        if name.endswith("_token") and param.default is not None:
            facts.append(
                StaticFact(
                    f"{role} default {name}",
                    code_of(param.default),
                    module.source(param),
                )
            )
    for node in walk(init.body):
        # ``self.image_token = "<image>" if ... else tokenizer.image_token``: where the token is settled.
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            if (
                isinstance(target, cst.Attribute)
                and code_of(target.value) == "self"
                and target.attr.value.endswith(("_token", "_token_id"))
            ):
                facts.append(
                    StaticFact(
                        f"{role} sets {target.attr.value}",
                        code_of(node.value),
                        module.source(node),
                    )
                )
    return facts


def _json_facts(
    directory: Path, name: str, keys: tuple[str, ...] | None, suffixes: tuple[str, ...]
) -> list[StaticFact]:
    """Values a JSON config sets for ``keys`` (or keys ending in ``suffixes``), with their lines."""
    path = directory / name
    try:
        text = path.read_text()
        data = json.loads(text)
    except (OSError, ValueError):
        return []
    lines = text.splitlines()
    facts = []
    for key, value in _flatten(data):
        leaf = key.rsplit(".", 1)[-1]
        # The processor's own settings (its constructor's kwargs) sit at the top of processor_config.json.
        own_setting = (
            name == "processor_config.json"
            and "." not in key
            and leaf not in ("chat_template", "processor_class")
        )
        if (keys and leaf in keys) or leaf.endswith(suffixes) or own_setting:
            line = _json_line(lines, key.split("."))
            facts.append(
                StaticFact(
                    f"{name} {key}",
                    json.dumps(value),
                    Source(name, line, lines[line - 1].strip() if line else ""),
                )
            )
    return facts


def _json_line(lines: list[str], path: list[str]) -> int:
    """The line (1-based, 0 if not found) of a nested key: each key searched after its parent's."""
    line = 0
    for key in path:
        line = next(
            (i for i in range(line + 1, len(lines) + 1) if f'"{key}"' in lines[i - 1]),
            0,
        )
        if not line:
            return 0
    return line


def _flatten(data: object, prefix: str = ""):
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "auto_map":
                continue
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and not (
                set(value) <= {"height", "width", "shortest_edge", "longest_edge"}
            ):
                yield from _flatten(value, path)
            else:
                yield path, value


_ROLES = {
    "AutoProcessor": "processor",
    "AutoConfig": "config",
    "AutoImageProcessor": "image processor",
    "AutoVideoProcessor": "video processor",
    "AutoFeatureExtractor": "feature extractor",
}


def inspect_statically(
    directory: Path, model_type: str, processor_code: ProcessorCode | None = None
) -> StaticReport:
    """Read the snapshot's own modules and configs without running them (see the module docstring).

    With ``processor_code`` (``--processor-code``), its processor class is read
    too, in place of the one ``auto_map`` names.
    """
    # The top-level model_type only: a nested config's (InternVL's llm_config) is not the snapshot's.
    facts = [
        f
        for f in _json_facts(directory, "config.json", ("model_type",), ())
        if f.fact == "config.json model_type"
    ]
    facts += _auto_map_facts(
        directory, skip=("AutoProcessor",) if processor_code else ()
    )
    if processor_code is not None:
        facts += _processor_code_facts(processor_code)
    facts += _json_facts(
        directory, "config.json", ("architectures",), ("_token_id", "_token_index")
    )
    for name in (
        "processor_config.json",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
    ):
        facts += _json_facts(directory, name, _GEOMETRY, ("_token", "_token_id"))
    facts += _entry_facts(directory, processor_code)
    chat = None if processor_code else read_chat_prompt(directory)
    facts += _chat_facts(directory, chat) if chat else []
    facts += _missing_package_facts(directory, processor_code)
    modules = tuple(shipped_modules(directory))
    outside = (
        (str(processor_code.root / processor_code.module_file),)
        if processor_code
        else ()
    )
    unsettled = CHAT_UNSETTLED if chat else UNSETTLED
    return StaticReport(
        model_type, modules, tuple(facts), unsettled=unsettled, outside=outside
    )


def _chat_facts(directory: Path, rule: ChatPromptRule) -> list[StaticFact]:
    """How the model's own prompt code writes an image, and the tiling its config sets."""
    text = " + ".join(
        repr(s.text) + "".join(f" × {t}" for t in s.times) for s in rule.segments
    )
    facts = [
        StaticFact("processor", "none: no auto_map entry or config names one"),
        StaticFact(
            "prompt built by",
            f"{rule.model_class}.{rule.method}(): {rule.placeholder!r} → {text}, "
            f"{rule.item_factor} per item",
            rule.source,
        ),
        StaticFact(
            "placeholder replaced",
            f"{rule.placeholder!r}, once per item, in order",
            rule.replace_source,
        ),
    ]
    for factor in rule.factors:
        settled = "not settled by the files" if factor.value is None else factor.value
        facts.append(
            StaticFact(factor.code, f"{settled} = {factor.rule}", factor.source)
        )
    tiling = read_chat_tiling(directory)
    facts += [
        StaticFact(f"config.json {key}", json.dumps(value), source)
        for key, value, source in tiling.settings
    ]
    if tiling.code is not None:
        facts.append(
            StaticFact("tiling code (model card)", "dynamic_preprocess()", tiling.code)
        )
    return facts


def _auto_map_facts(directory: Path, skip: tuple[str, ...]) -> list[StaticFact]:
    """The classes ``auto_map`` names (but those of the auto classes in ``skip``), read from the snapshot's modules."""
    facts: list[StaticFact] = []
    parsed: dict[str, StaticModule | None] = {}
    first: dict[str, tuple[str, str]] = {}
    for auto, module_name, class_name in auto_references(directory):
        first.setdefault(
            auto, (module_name, class_name)
        )  # a [slow, fast] pair: the first
    for auto, (module_name, class_name) in sorted(first.items()):
        if auto in skip:
            continue
        if module_name not in parsed:
            try:
                parsed[module_name] = StaticModule(directory, module_name)
            except (OSError, cst.ParserSyntaxError) as exc:
                parsed[module_name] = None
                facts.append(
                    StaticFact(
                        f"{auto} module",
                        f"{module_name} cannot be read ({type(exc).__name__})",
                    )
                )
        module = parsed[module_name]
        if module is None:
            continue
        classdef = module.classes.get(class_name)
        if classdef is None:
            facts.append(
                StaticFact(
                    auto,
                    f"{class_name} is not defined at the top level of {module_name}",
                )
            )
            continue
        facts += _class_facts(module, classdef, _ROLES.get(auto, auto))
    return facts


def _processor_code_facts(code: ProcessorCode) -> list[StaticFact]:
    """``--processor-code``'s processor class, read as the snapshot's own are."""
    try:
        module = StaticModule(code.root, code.module_file)
    except (OSError, cst.ParserSyntaxError) as exc:
        return [
            StaticFact(
                "processor module",
                f"{code.module_file} cannot be read ({type(exc).__name__})",
            )
        ]
    return _class_facts(module, module.classes[code.class_name], "processor")


def _missing_package_facts(
    directory: Path, code: ProcessorCode | None
) -> list[StaticFact]:
    """Packages the code imports that are not installed: running it would stop there."""
    missing = missing_packages(directory, shipped_modules(directory))
    missing += missing_packages(code.root, [code.module_file]) if code else []
    return [
        StaticFact(
            "imports lazily" if m.lazy else "needs package",
            f"`{m.package}`, not installed; only code that runs this import needs it"
            if m.lazy
            else f"`{m.package}`, not installed (pip install {m.package})",
            Source(m.file, m.line, m.code),
        )
        for m in missing
    ]


def _entry_facts(directory: Path, code: ProcessorCode | None) -> list[StaticFact]:
    """The processor's own entry point, when it is not ``__call__``, and what it does to the prompt."""
    if code is not None:
        where = (code.root / code.module_file, code.module_file, code.class_name)
    else:
        found = next(
            (
                (directory / module, module, name)
                for auto, module, name in auto_references(directory)
                if auto == "AutoProcessor"
            ),
            None,
        )
        if found is None:
            return []
        where = found
    try:
        return [StaticFact(*fact) for fact in entry_facts(*where)]
    except (OSError, cst.ParserSyntaxError):
        return []  # the module's own fact already says it cannot be read


# A snapshot's own processor module; its config.json's auto_map names the class.
_SHIPPED = """
ProcessorMixin = object  # transformers' base: a static read never imports it


class NanoVLProcessor(ProcessorMixin):
    attributes = ["image_processor", "tokenizer"]
    image_processor_class = "AutoImageProcessor"

    def __init__(self, image_processor=None, tokenizer=None, image_token="<image>", **kwargs):
        self.image_token = tokenizer.image_token if hasattr(tokenizer, "image_token") else image_token

    def replace_image_token(self, image_inputs, image_idx, **kwargs):
        return self.image_token * self.image_seq_length
"""


def _inspect_shipped(snippet: ModuleType, auto_map: dict[str, str]) -> list[tuple]:
    """The facts read without running the snippet, as a snapshot holding it and a config with ``auto_map``."""
    directory = Path(str(snippet.__file__)).parent
    config = {"model_type": "nano_vl", "auto_map": auto_map}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    report = inspect_statically(directory, "nano_vl")
    return [
        (fact.fact, fact.value, fact.source.line if fact.source else 0)
        for fact in report.facts
    ]


EXAMPLES = [
    valid(
        "shipped_processor_read_without_running_it",
        _SHIPPED,
        lambda snippet: _inspect_shipped(
            snippet, {"AutoProcessor": "example.NanoVLProcessor"}
        ),
        [
            ("config.json model_type", '"nano_vl"', 2),
            ("processor", "NanoVLProcessor(ProcessorMixin)", 4),
            ("processor attributes", '["image_processor", "tokenizer"]', 5),
            ("processor image_processor_class", '"AutoImageProcessor"', 6),
            ("processor default image_token", '"<image>"', 8),
            (
                "processor sets image_token",
                'tokenizer.image_token if hasattr(tokenizer, "image_token") else image_token',
                9,
            ),
            ("processor defines", "replace_image_token()", 11),
        ],
    ),
    invalid(
        "a_config_without_auto_map_names_no_code",
        "",
        lambda snippet: _inspect_shipped(snippet, {}),
        expected=[("config.json model_type", '"nano_vl"', 2)],
    ),
]
