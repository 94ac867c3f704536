"""The parameter of a processor's own ``__call__`` that takes a modality's items, as a port fact.

How HF's ``__call__`` is read, with InstructBLIP-Video's worked example
(videos taken as ``images``, handed on with nothing beside them), is
:mod:`mmport.hf.calls`: mmport's own processor call needs it too. Here the
reading becomes a :class:`~mmport.spec.CallParameter` that says where in
HF's source the parameter and the sub-processor call are.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import find_method
from mmport.hf.calls import forwards_settings, items_parameter, takes_usual_parameter
from mmport.spec import CallParameter, Source

__all__ = ["call_parameter"]


@lru_cache(maxsize=256)
def call_parameter(processor_cls: type[Any], modality: str) -> CallParameter | None:
    """Where ``processor_cls.__call__`` takes ``modality``'s items, if not by the usual name (see module doc).

    None when the call has the usual parameter (``videos``), or defines no
    ``__call__`` of its own that names another.
    """
    if takes_usual_parameter(processor_cls, modality):
        return None
    found = find_method(processor_cls, "__call__", models_only=True)
    located = items_parameter(found[1], modality) if found else None
    if found is None or not located:
        return None
    parsed, (param, call) = found[0], located
    if (
        call is None
    ):  # the items reach the sub-processor some other way: settings are routed as usual
        return CallParameter(param.name.value, parsed.source(param))
    return CallParameter(
        param.name.value,
        parsed.source(param),
        forwards_settings=forwards_settings(call),
        call_source=parsed.source(call),
    )


# InstructBLIP-Video takes its videos as `images` and hands the video processor nothing beside them.
_INSTRUCTBLIP_VIDEO = """
VideoInput = list

class InstructBlipVideoProcessor:
    def __call__(self, images: VideoInput | None = None, text=None, return_tensors=None, **kwargs):
        text_encoding = self.tokenizer(text, **kwargs)
        image_encoding = self.video_processor(images, return_tensors=return_tensors)
        return image_encoding
"""

EXAMPLES = [
    valid(
        "instructblip_video_takes_videos_as_images",
        _INSTRUCTBLIP_VIDEO,
        lambda snippet: call_parameter(snippet.InstructBlipVideoProcessor, "video"),
        CallParameter(
            "images",
            Source(
                SNIPPET_FILE,
                4,
                "def __call__(self, images: VideoInput | None = None, text=None, return_tensors=None, **kwargs):",
            ),
            forwards_settings=False,
            call_source=Source(
                SNIPPET_FILE,
                6,
                "image_encoding = self.video_processor(images, return_tensors=return_tensors)",
            ),
        ),
    ),
    invalid(
        "usual_videos_parameter_needs_no_fact",
        """
        VideoInput = list

        class LlavaNextVideoProcessor:
            def __call__(self, images=None, text=None, videos: VideoInput | None = None, **kwargs):
                return self.video_processor(videos, **kwargs)
        """,
        lambda snippet: call_parameter(snippet.LlavaNextVideoProcessor, "video"),
    ),
]
