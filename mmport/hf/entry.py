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
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from mmport.hf.code import defining_class, transformers_classes

__all__ = ["base_methods", "call_entry", "entry_point", "most_written_image_id"]

# Per processor class, its entry point (None: __call__), read once.
_ENTRY_POINTS: weakref.WeakKeyDictionary[type, str | None] = weakref.WeakKeyDictionary()
# The parameters a method must take to be a processor's entry point.
ENTRY_PARAMETERS = frozenset({"text", "images"})


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
    """``processor.<name>(text=prompt, images=images, **settings)`` as a batch of one.

    The entry point takes one sample: the prompt as a string and its images
    as a flat list (None when there are none). Sequence-shaped outputs gain a
    leading batch axis; per-item tensors (crops, masks) stay as HF returns
    them for the sample.
    """
    from transformers import BatchFeature

    out = getattr(processor, name)(
        text=prompt, images=list(images) if images else None, **settings
    )
    batched = dict(out)
    for key in ("input_ids", "attention_mask"):
        value = batched.get(key)
        if value is not None and getattr(value, "ndim", None) == 1:
            batched[key] = value.unsqueeze(0)
    return BatchFeature(batched)


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
