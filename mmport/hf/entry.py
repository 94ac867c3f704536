"""Processors whose entry point is a method of their own, not ``__call__``.

A 5.x processor is called: ``processor(text=..., images=...)`` runs
``ProcessorMixin.__call__``. Some remote processors predate that and leave
``__call__`` to the base class (which knows nothing of them) while users
call another method. Molmo's model card does::

    inputs = processor.process(images=[image], text="Describe this image.")

``process`` takes one sample (a string and its images), tokenizes it itself
and returns unbatched tensors. :func:`entry_point` finds such a method: the
model code defines no ``__call__``, and exactly one public method of its own
takes both ``text`` and ``images``. :func:`call_entry` calls it the way
:func:`mmport.hf.processor.call_processor` calls ``__call__``, and gives the
answer a batch of one (``input_ids`` gains a leading axis), so every stage
reads it as it reads ``__call__``'s.

Others define ``__call__`` but not transformers' protocol. DeepSeek-VL2's is
``__call__(self, *, prompt=None, conversations=None, images=None, **kwargs)``:
``text=`` vanishes into ``**kwargs``, so :func:`text_parameter` reads the
text's name from the signature (``prompt``). It answers a collated batch (a
``BatchCollateOutput``, not a ``BatchFeature``): :func:`call_entry` keeps its
tensors, drops the batch-of-one axis from the item tensors (``images``
``[1, tiles, 3, H, W]`` becomes ``[tiles, 3, H, W]``: rows of the items, as a
``BatchFeature``'s are) and, for a sample without images, the zero filler it
writes in their place (``torch.zeros((1, 3, H, W))``).
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from mmport.errors import FOREIGN_ERRORS
from mmport.hf.code import defining_class, transformers_classes

__all__ = [
    "TEXT_PARAMETERS",
    "base_methods",
    "call_entry",
    "entry_point",
    "most_written_image_id",
    "own_call_text",
]

# Per processor class, its entry point (None: __call__), read once.
_ENTRY_POINTS: weakref.WeakKeyDictionary[type, str | None] = weakref.WeakKeyDictionary()
# The parameters a method must take to be a processor's entry point.
ENTRY_PARAMETERS = frozenset({"text", "images"})
# Names an entry point's text parameter goes by, in the order they are looked for.
TEXT_PARAMETERS = ("text", "prompt", "prompts", "texts")


def _takes_text_and_images(function: Any) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # not introspectable: a builtin, say
        return False
    return set(parameters) >= ENTRY_PARAMETERS


def entry_point(processor_cls: type[Any]) -> str | None:
    """The method ``processor_cls`` is called by when it is not ``__call__`` (``"process"``), else None.

    None when the model code defines ``__call__`` (that is the entry point),
    or when no single public method of the model code takes ``text`` and
    ``images``. Read once per class.
    """
    if processor_cls not in _ENTRY_POINTS:
        _ENTRY_POINTS[processor_cls] = _entry_point(processor_cls)
    return _ENTRY_POINTS[processor_cls]


def _entry_point(processor_cls: type[Any]) -> str | None:
    if defining_class(processor_cls, "__call__", models_only=True) is not None:
        return None
    hooks = base_methods()
    found = sorted(
        {
            name
            for klass in transformers_classes(processor_cls, models_only=True)
            for name, value in vars(klass).items()
            if not name.startswith("_")
            and name not in hooks
            and inspect.isfunction(value)
            and _takes_text_and_images(value)
        }
    )
    return found[0] if len(found) == 1 else None


def text_parameter(function: Any) -> str | None:
    """The name ``function`` takes a prompt's text by (``text``, DeepSeek-VL2's ``prompt``), else None."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # not introspectable: a builtin, say
        return None
    return next((name for name in TEXT_PARAMETERS if name in parameters), None)


def own_call_text(processor_cls: type[Any]) -> str | None:
    """The text parameter of a ``__call__`` of the model code's own that does not take ``text``, else None.

    DeepSeek-VL2's ``__call__(self, *, prompt=None, conversations=None,
    images=None, **kwargs)`` gives ``"prompt"``; a ``__call__`` taking
    ``text`` (transformers' protocol, or an older processor's own) gives None.
    """
    owner = defining_class(processor_cls, "__call__", models_only=True)
    if owner is None:
        return None
    call = vars(owner)["__call__"]
    name = text_parameter(call)
    takes_images = "images" in inspect.signature(call).parameters
    return name if takes_images and name not in (None, "text") else None


def base_methods() -> frozenset[str]:
    """Names ``ProcessorMixin`` defines: a model's override of one is a hook its ``__call__`` runs, not an entry point.

    Florence-2 overrides ``prepare_inputs_layout(self, images, text, ...)``,
    Cohere2-Vision ``validate_inputs``; both are called by the base ``__call__``.
    """
    from transformers import ProcessorMixin

    return frozenset(dir(ProcessorMixin))


def call_entry(
    processor: Any, name: str, prompt: str | None, images: list, **settings: Any
) -> Any:
    """``processor.<name>(<text>=prompt, images=images, **settings)`` as a batch of one.

    The entry point takes one sample: the prompt as a string (under the name
    its signature gives, see :func:`text_parameter`) and its images as a flat
    list. Without images it gets None, or, where None fails as a list would
    not (DeepSeek-VL2 takes ``len(images)``: a TypeError), the empty list.
    The answer is normalized (see the module docstring): sequence-shaped
    outputs have a leading batch axis, per-item tensors are the items' rows.
    """
    method = getattr(processor, name)
    text = text_parameter(method) or "text"
    arguments = {text: prompt, **settings}
    try:
        if images:
            out = method(images=list(images), **arguments)
        else:
            try:
                out = method(images=None, **arguments)
            except TypeError as refused:
                try:
                    out = method(images=[], **arguments)
                except (
                    FOREIGN_ERRORS
                ):  # the empty list fails too (Molmo's): None's refusal stands
                    raise refused from None
    except AssertionError as exc:
        # Such code checks its input with asserts (DeepSeek-VL2: as many placeholders
        # as images): a refusal of the input, as transformers' ValueError is.
        raise ValueError(
            f"{type(processor).__name__}.{name} refuses the input (an assert: {exc or 'no message'})"
        ) from exc
    return _normalized(out, bool(images))


def _normalized(out: Any, has_images: bool) -> Any:
    """An entry point's answer as a ``BatchFeature`` of one sample (see the module docstring)."""
    import torch
    from transformers import BatchFeature

    data = dict(out)
    ids = data.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.ndim == 1:
        # One unbatched sample (Molmo's process): its sequences gain the batch axis.
        for key in ("input_ids", "attention_mask"):
            value = data.get(key)
            if value is not None and getattr(value, "ndim", None) == 1:
                data[key] = value.unsqueeze(0)
        return BatchFeature(data)
    tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
    items = {k: v for k, v in tensors.items() if v.shape != ids.shape}
    if not isinstance(out, BatchFeature) and ids.shape[0] == 1:
        # A collated batch of one: the item tensors' rows are this sample's.
        items = {
            k: v[0] if v.ndim > 1 and v.shape[0] == 1 else v for k, v in items.items()
        }
    if not has_images:
        # What the sample holds in place of images it has none of: zeros.
        items = {k: v for k, v in items.items() if bool(v.any())}
    text = {k: v for k, v in tensors.items() if v.shape == ids.shape}
    return BatchFeature({**text, **items})


def most_written_image_id(processor: Any) -> int:
    """The id an entry-point processor writes most for one image under an empty prompt.

    Such processors name no image token: the image's embedding positions are
    marked by the token its block repeats (Molmo's ``<im_patch>``).
    """
    from mmport.hf.modalities import most_written
    from mmport.hf.processor import call_processor, probe_media

    name = entry_point(type(processor))
    assert name is not None, "called for entry-point processors only"
    ids = call_processor(processor, "", [probe_media("image", 0)])["input_ids"][0]
    found = most_written(ids.tolist(), set(), set())
    assert found is not None, "an image's ids are never empty"
    return found
