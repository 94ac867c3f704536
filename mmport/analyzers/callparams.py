"""The parameter of a processor's own ``__call__`` that takes a modality's items.

5.x processors take ``images=``, ``videos=`` and ``audio=`` and route every
setting to their sub-processors (``ProcessorMixin.__call__``). An older
processor with a ``__call__`` of its own may take a modality under another
name. InstructBLIP-Video takes its videos as ``images``::

    def __call__(self, images: VideoInput | None = None, text=None, ..., **kwargs):
        ...
        image_encoding = self.video_processor(images, return_tensors=return_tensors)

so a video goes in as ``images=[frames]``; ``videos=`` would land, unread,
in the tokenizers' ``**kwargs``. Nothing beside the frames reaches the video
processor (no ``**`` in its call), so metadata and ``do_sample_frames`` must
not go in either. The parameter is the one annotated with the modality's
input type (``VideoInput``), else the one the sub-processor's call receives.
"""

from __future__ import annotations

import inspect
from functools import lru_cache

import libcst as cst

from mmport.analyzers.sourcefile import ParsedClass, find_method, names_in
from mmport.spec import CallParameter

__all__ = ["SUB_PROCESSORS", "USUAL_PARAMETERS", "call_parameter"]

# The parameter each modality's items usually go in by, and the type HF annotates it with.
USUAL_PARAMETERS = {"image": "images", "video": "videos", "audio": "audio"}
INPUT_TYPES = {"image": "ImageInput", "video": "VideoInput", "audio": "AudioInput"}
# The processor attributes holding each modality's sub-processor, in the order HF looks them up.
SUB_PROCESSORS = {"image": ("image_processor",), "video": ("video_processor",), "audio": ("audio_processor", "feature_extractor")}


class _SubProcessorCalls(cst.CSTVisitor):
    """Calls ``self.<sub_processor>(first, ...)``: the name ``first`` and the call."""

    def __init__(self, attributes: tuple[str, ...]) -> None:
        self.attributes = attributes
        self.calls: list[tuple[str, cst.Call]] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
            return
        if func.attr.value in self.attributes and node.args and isinstance(node.args[0].value, cst.Name) and not node.args[0].keyword:
            self.calls.append((node.args[0].value.value, node))


def _annotated(func: cst.FunctionDef, type_name: str) -> cst.Param | None:
    """The parameter whose annotation names ``type_name`` (``images: VideoInput | None``)."""
    for param in (*func.params.params, *func.params.kwonly_params):
        if param.annotation is not None and type_name in names_in(param.annotation):
            return param
    return None


def _parameter(parsed: ParsedClass, func: cst.FunctionDef, modality: str) -> CallParameter | None:
    calls = _SubProcessorCalls(SUB_PROCESSORS[modality])
    func.visit(calls)
    params = {p.name.value: p for p in (*func.params.params, *func.params.kwonly_params)}
    param = _annotated(func, INPUT_TYPES[modality]) or next((params[n] for n, _ in calls.calls if n in params), None)
    if param is None or param.name.value == USUAL_PARAMETERS[modality]:
        return None
    name = param.name.value
    call = next((c for n, c in calls.calls if n == name), None)
    if call is None:  # the items reach the sub-processor some other way: settings are routed as usual
        return CallParameter(name, parsed.source(param))
    forwards = any(arg.star == "**" for arg in call.args)
    return CallParameter(name, parsed.source(param), forwards_settings=forwards, call_source=parsed.source(call))


@lru_cache(maxsize=256)
def call_parameter(processor_cls: type, modality: str) -> CallParameter | None:
    """Where ``processor_cls.__call__`` takes ``modality``'s items, if not by the usual name (see module doc).

    None when the call has the usual parameter (``videos``), or defines no
    ``__call__`` of its own that names another.
    """
    if USUAL_PARAMETERS[modality] in inspect.signature(processor_cls.__call__).parameters:
        return None
    found = find_method(processor_cls, "__call__", models_only=True)
    if found is None:
        return None
    return _parameter(*found, modality)
