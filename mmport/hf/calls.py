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

Both sides need this: mmport's processor call (:func:`items_call`) to call
HF right, and the analyzers (:mod:`mmport.analyzers.callparams`) to tell the
port, with where HF says it. So the reading of the ``__call__`` node lives
here; its provenance stays with the analyzers.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any

import libcst as cst
import libcst.matchers as m

from mmport.hf.code import method_node
from mmport.hf.modalities import SUB_PROCESSORS

__all__ = [
    "INPUT_TYPES",
    "USUAL_PARAMETERS",
    "forwards_settings",
    "items_call",
    "items_parameter",
    "takes_usual_parameter",
]

# The parameter each modality's items usually go in by, and the type HF annotates it with.
USUAL_PARAMETERS = {"image": "images", "video": "videos", "audio": "audio"}
INPUT_TYPES = {"image": "ImageInput", "video": "VideoInput", "audio": "AudioInput"}


class _SubProcessorCalls(cst.CSTVisitor):
    """Calls ``self.<sub_processor>(first, ...)``: the name ``first`` and the call."""

    def __init__(self, attributes: tuple[str, ...]) -> None:
        self.attributes = attributes
        self.calls: list[tuple[str, cst.Call]] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            return
        if (
            func.attr.value in self.attributes
            and node.args
            and isinstance(node.args[0].value, cst.Name)
            and not node.args[0].keyword
        ):
            self.calls.append((node.args[0].value.value, node))


def _annotated(func: cst.FunctionDef, type_name: str) -> cst.Param | None:
    """The parameter whose annotation names ``type_name`` (``images: VideoInput | None``)."""
    for param in (*func.params.params, *func.params.kwonly_params):
        if param.annotation is not None and m.findall(
            param.annotation, m.Name(type_name)
        ):
            return param
    return None


def items_parameter(
    func: cst.FunctionDef, modality: str
) -> tuple[cst.Param, cst.Call | None] | None:
    """The parameter of ``func`` (a processor's ``__call__``) taking ``modality``'s items, where it is
    not the usual one, and the sub-processor call that receives it (None when none is found)."""
    calls = _SubProcessorCalls(SUB_PROCESSORS[modality])
    func.visit(calls)
    params = {
        p.name.value: p for p in (*func.params.params, *func.params.kwonly_params)
    }
    param = _annotated(func, INPUT_TYPES[modality]) or next(
        (params[n] for n, _ in calls.calls if n in params), None
    )
    if param is None or param.name.value == USUAL_PARAMETERS[modality]:
        return None
    return param, next((c for n, c in calls.calls if n == param.name.value), None)


def forwards_settings(call: cst.Call | None) -> bool:
    """True unless the sub-processor's ``call`` hands it the items alone (no ``**`` beside them).

    Items that reach the sub-processor some other way (no ``call``) leave
    settings routed as usual.
    """
    return call is None or any(arg.star == "**" for arg in call.args)


def takes_usual_parameter(processor_cls: type[Any], modality: str) -> bool:
    """True when ``processor_cls.__call__`` has the usual parameter for ``modality`` (``videos``)."""
    return (
        USUAL_PARAMETERS[modality]
        in inspect.signature(processor_cls.__call__).parameters
    )


@lru_cache(maxsize=256)
def items_call(processor_cls: type[Any], modality: str) -> tuple[str, bool]:
    """``(parameter, forwards settings)``: how ``processor_cls.__call__`` takes ``modality``'s items (see module doc)."""
    usual = (USUAL_PARAMETERS[modality], True)
    if takes_usual_parameter(processor_cls, modality):
        return usual
    func: Any = method_node(processor_cls, "__call__", models_only=True)  # type: ignore[arg-type]  # a class is hashable; mypy misreads type[...] against Hashable
    found = items_parameter(func, modality) if func is not None else None
    if found is None:
        return usual
    param, call = found
    return param.name.value, forwards_settings(call)
