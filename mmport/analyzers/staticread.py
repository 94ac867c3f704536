"""A snapshot's module read with libcst, without importing it: its top-level classes, with positions.

Shared by the static reads of remote code (:mod:`mmport.analyzers.remote_static`,
:mod:`mmport.analyzers.chatprompt`), which must not run a line of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from mmport.analyzers.examples import SNIPPET_FILE, invalid, snippet_line, valid
from mmport.spec import Source

__all__ = ["StaticModule", "code_of", "walk"]


class StaticModule:
    """One parsed snapshot module: its classes, with positions."""

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.lines = (directory / name).read_text().splitlines()
        wrapper = MetadataWrapper(
            cst.parse_module("\n".join(self.lines)), unsafe_skip_copy=True
        )
        self.positions = wrapper.resolve(PositionProvider)
        self.classes = {
            s.name.value: s for s in wrapper.module.body if isinstance(s, cst.ClassDef)
        }

    def source(self, node: cst.CSTNode) -> Source:
        """Provenance of ``node``: this module's name, its line and that line's code."""
        line = self.positions[node].start.line
        return Source(self.name, line, self.lines[line - 1].strip())


def code_of(node: cst.CSTNode) -> str:
    """The node's code on one line (a fact's value)."""
    return " ".join(cst.Module([]).code_for_node(node).split())


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node under it, depth first."""
    yield node
    for child in node.children:
        yield from walk(child)


# A remote modeling module as InternVL2 ships it: a config class, the model, a helper function.
_MODELING = """
import warnings


class InternVLChatConfig:
    model_type = "internvl_chat"


class InternVLChatModel:
    def __init__(self, config, vision_model=None, language_model=None):
        self.num_image_token = int((config.force_image_size // config.vision_config.patch_size) ** 2
                                   * (config.downsample_ratio ** 2))

    def chat(self, tokenizer, pixel_values, question, generation_config):
        warnings.warn("chat() is read statically here")


def version_cmp(v1, v2, op="eq"):
    return v1 == v2
"""


def _read_snippet(snippet: ModuleType) -> StaticModule:
    """The loaded snippet's own file, parsed as a snapshot's module is (never run)."""
    return StaticModule(Path(str(snippet.__file__)).parent, SNIPPET_FILE)


def _init_assignment(snippet: ModuleType) -> tuple[Source, str]:
    """The first statement of the model's ``__init__``: its provenance and its code on one line."""
    parsed = _read_snippet(snippet)
    init = next(
        s
        for s in parsed.classes["InternVLChatModel"].body.body
        if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"
    )
    statement = init.body.body[0]
    return parsed.source(statement), code_of(statement)


EXAMPLES = [
    valid(
        "internvl_modeling_module_top_level_classes",
        _MODELING,
        lambda snippet: list(_read_snippet(snippet).classes),
        ["InternVLChatConfig", "InternVLChatModel"],
    ),
    valid(
        "init_assignment_read_with_its_line_and_one_line_code",
        _MODELING,
        _init_assignment,
        (
            snippet_line(_MODELING, "self.num_image_token = int("),
            "self.num_image_token = int((config.force_image_size // config.vision_config.patch_size) ** 2"
            " * (config.downsample_ratio ** 2))",
        ),
    ),
    invalid(
        "class_defined_under_an_if_is_not_top_level",
        """
        try:
            import flash_attn  # noqa: F401

            has_flash_attn = True
        except ImportError:
            has_flash_attn = False

        if has_flash_attn:
            class FlashAttention:
                def forward(self, qkv):
                    return qkv
        """,
        lambda snippet: _read_snippet(snippet).classes.get("FlashAttention"),
    ),
]
