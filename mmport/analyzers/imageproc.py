"""Facts from the HF image processor: the processed item size and output keys.

A 5.x image processor declares its defaults as class attributes
(``crop_size = {"height": 224, "width": 224}``, ``do_center_crop = True``)
and returns ``BatchFeature(data={"pixel_values": ...})``. When it center-crops,
every item leaves at ``crop_size``; otherwise at ``size`` (when that is a
height/width pair). The port reads these attributes at run time, so it follows
whatever the snapshot's image processor config says.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import (
    SelfAssignments,
    class_assignments,
    find_method,
    parse_class,
)
from mmport.hf.code import transformers_classes
from mmport.hf.syntax import string_value
from mmport.spec import FieldSpec, GeometryRule, Source

__all__ = ["analyze_geometry", "analyze_output_fields"]


def _init_assignments(image_processor_cls: type[Any]) -> dict[str, tuple]:
    """``self.<name> = ...`` lines of the constructor: older image processors set defaults there."""
    found = find_method(image_processor_cls, "__init__")
    if found is None:
        return {}
    parsed, func = found
    visitor = SelfAssignments()
    func.visit(visitor)
    return {name: (parsed, node) for name, node in visitor.nodes.items()}


def analyze_geometry(image_processor_cls: type[Any]) -> GeometryRule:
    """How a fixed-size image processor sizes every item."""
    attrs = {
        **_init_assignments(image_processor_cls),
        **class_assignments(image_processor_cls),
    }
    if "crop_size" in attrs and "do_center_crop" in attrs:
        parsed, node = attrs["crop_size"]
        expr = "image_processor.crop_size if image_processor.do_center_crop else image_processor.size"
        return GeometryRule("fixed", expr, parsed.source(node))
    if "size" in attrs:
        parsed, node = attrs["size"]
        return GeometryRule("fixed", "image_processor.size", parsed.source(node))
    return GeometryRule("none")


class _BatchFeatureKeys(cst.CSTVisitor):
    """String keys of ``BatchFeature(data={...})`` dict literals."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, cst.CSTNode]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Name) and node.func.value == "BatchFeature"):
            return
        for arg in node.args:
            if isinstance(arg.value, cst.Dict) and (
                arg.keyword is None or arg.keyword.value == "data"
            ):
                for element in arg.value.elements:
                    if (
                        isinstance(element, cst.DictElement)
                        and (key := string_value(element.key)) is not None
                    ):
                        self.keys.append((key, element.key))


def analyze_output_fields(
    image_processor_cls: type[Any], modality: str = "image"
) -> tuple[FieldSpec, ...]:
    """Output keys of the image processor; each item is one slice (``batched``)."""
    for klass in transformers_classes(image_processor_cls):
        parsed = parse_class(klass)
        if parsed is None:
            continue
        visitor = _BatchFeatureKeys()
        parsed.classdef.visit(visitor)
        if visitor.keys:
            return tuple(
                FieldSpec(key, "batched", parsed.source(node))
                for key, node in dict(visitor.keys).items()
            )
    return (FieldSpec("pixel_values", "batched", Source("(default)", 0)),)


# CLIP's image processor (LLaVA's): center-crops every item to crop_size by default.
_CLIP = """
class CLIPImageProcessor:
    size = {"shortest_edge": 224}
    crop_size = {"height": 224, "width": 224}
    do_center_crop = True

    def _preprocess(self, images, **kwargs):
        return BatchFeature(data={"pixel_values": images}, tensor_type=kwargs.get("return_tensors"))
"""

EXAMPLES = [
    valid(
        "clip_center_crops_to_crop_size",
        _CLIP,
        lambda snippet: analyze_geometry(snippet.CLIPImageProcessor),
        GeometryRule(
            "fixed",
            "image_processor.crop_size if image_processor.do_center_crop else image_processor.size",
            Source(SNIPPET_FILE, 3, 'crop_size = {"height": 224, "width": 224}'),
        ),
    ),
    valid(
        "siglip_resizes_to_size",
        """
        class SiglipImageProcessor:
            size = {"height": 224, "width": 224}
            do_resize = True
        """,
        lambda snippet: analyze_geometry(snippet.SiglipImageProcessor),
        GeometryRule(
            "fixed",
            "image_processor.size",
            Source(SNIPPET_FILE, 2, 'size = {"height": 224, "width": 224}'),
        ),
    ),
    valid(
        "clip_outputs_pixel_values_per_item",
        _CLIP,
        lambda snippet: analyze_output_fields(snippet.CLIPImageProcessor),
        (
            FieldSpec(
                "pixel_values",
                "batched",
                Source(
                    SNIPPET_FILE,
                    7,
                    'return BatchFeature(data={"pixel_values": images}, tensor_type=kwargs.get("return_tensors"))',
                ),
            ),
        ),
    ),
    invalid(
        "qwen2_vl_declares_no_fixed_size",
        """
        class Qwen2VLImageProcessor:
            min_pixels = 56 * 56
            max_pixels = 28 * 28 * 1280
        """,
        lambda snippet: analyze_geometry(snippet.Qwen2VLImageProcessor),
        expected=GeometryRule("none"),
    ),
]
