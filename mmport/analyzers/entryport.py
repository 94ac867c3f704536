"""The port of a processor whose entry point is a method of its own (Molmo's ``process``).

:mod:`mmport.analyzers.entrypoint` reads from the source what the entry point
does to the prompt: the text around every prompt, the token it puts first,
where the images go. Here, with the user's consent, HF's entry point runs
once on an empty prompt with one image, and twice more, to check that reading
and to observe what only running shows:

- HF's ids are the token put first, the image's tokens, then the prompt's
  own tokens (``PROMPT_BEFORE + "" + PROMPT_AFTER``): the reading holds;
- the token HF writes most for the image is the one at its embedding
  positions (``<im_patch>``);
- the outputs holding the image's rows: keys whose first axis, for two
  images, is the sum of each image's alone (HF lays rows end to end).

A reading these checks contradict is an :class:`AnalysisError` naming the
line, never a port built on it. The count per image is delegated to HF's
entry point at run time, a visible strategy the port's docstring names.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

from mmport import __version__
from mmport.analyzers.entrypoint import _MOLMO, read_entry_point
from mmport.analyzers.examples import invalid, snippet_line, valid
from mmport.analyzers.sourcefile import relative_source_path
from mmport.errors import FOREIGN_ERRORS, AnalysisError, BadReferenceError, one_line
from mmport.hf.entry import call_entry
from mmport.hf.modalities import most_written
from mmport.hf.processor import probe_media
from mmport.sources import Snapshot
from mmport.spec import EntryPointSpec, PortSpec

__all__ = ["analyze_entry_port"]

# Keys of the entry point's output that belong to the prompt, not to an image.
PROMPT_KEYS = ("input_ids", "attention_mask")


def _read(processor_cls: type[Any]) -> EntryPointSpec:
    """The static reading of the entry point, or why it cannot be ported."""
    path = inspect.getsourcefile(processor_cls)
    entry = (
        read_entry_point(Path(path), relative_source_path(path), processor_cls.__name__)
        if path
        else None
    )
    name = processor_cls.__name__
    if entry is None:
        raise AnalysisError(f"{name}: no entry point of its own could be read")
    if not entry.format_read:
        raise AnalysisError(
            f"{name}.{entry.method} ({entry.source}): its prompt helper does more than put text around the prompt"
        )
    if not entry.prepended or entry.items_index != -1:
        raise AnalysisError(
            f"{name}.{entry.method} ({entry.source}): only images inserted at the start, "
            "after one token put first, are ported"
        )
    return entry


def _run(processor: Any, entry: EntryPointSpec, images: list) -> dict[str, Any]:
    """HF's entry point on an empty prompt and ``images``; a refusal is the snapshot's fault."""
    try:
        return dict(call_entry(processor, entry.method, "", images))
    except FOREIGN_ERRORS as exc:
        # whatever HF raises: the reference cannot take an ordinary image
        raise BadReferenceError(
            f"{type(processor).__name__}.{entry.method} ({entry.source}) rejects an empty prompt "
            f"with {len(images)} ordinary image(s): {one_line(exc)}"
        ) from exc


def _first_token_id(tokenizer: Any, entry: EntryPointSpec) -> int | None:
    ids = [getattr(tokenizer, f"{t}_id", None) for t in entry.prepended]
    first = ids[0]
    for later in ids[1:]:
        first = first or later  # HF's own `a or b`
    return first


def _image_tokens(processor: Any, entry: EntryPointSpec, ids: list[int]) -> list[int]:
    """The image's tokens in HF's ids for an empty prompt, checked against the reading."""
    tokenizer = processor.tokenizer
    bare = [
        _first_token_id(tokenizer, entry),
        *tokenizer.encode(entry.before + entry.after, add_special_tokens=False),
    ]
    tokens = ids[1 : len(ids) - len(bare) + 1]
    if [*ids[:1], *ids[1 + len(tokens) :]] != bare:
        raise AnalysisError(
            f"{type(processor).__name__}.{entry.method} ({entry.source}) does not lay out the prompt as read: "
            f"HF gives {ids[:3]}...{ids[-len(bare) + 1 :]}, the reading {bare}"
        )
    return tokens


def _fields(processor: Any, entry: EntryPointSpec) -> tuple[str, ...]:
    """The outputs holding an image's rows: their first axis adds up over two images."""
    one, other = (_run(processor, entry, [probe_media("image", i)]) for i in (0, 1))
    both = _run(processor, entry, [probe_media("image", 0), probe_media("image", 1)])
    keys = tuple(k for k in both if k not in PROMPT_KEYS)
    for key in keys:
        if len(both[key]) != len(one[key]) + len(other[key]):
            raise AnalysisError(
                f"{type(processor).__name__}.{entry.method} returns {key} whose rows do not add up over images"
            )
    return keys


def analyze_entry_port(snapshot: Snapshot, processor: Any) -> PortSpec:
    """The PortSpec of a processor called by a method of its own (see the module docstring)."""
    import transformers

    entry = _read(type(processor))
    ids = _run(processor, entry, [probe_media("image", 0)])["input_ids"][0].tolist()
    tokens = _image_tokens(processor, entry, ids)
    embed_id = most_written(tokens, set(), set())
    entry = dataclasses.replace(
        entry,
        embed_token=str(processor.tokenizer.convert_ids_to_tokens(embed_id)),
        fields=_fields(processor, entry),
    )
    architectures = snapshot.config_dict.get("architectures") or []
    prefix = type(processor).__name__.removesuffix("Processor")
    architecture = architectures[0] if architectures else f"{prefix}ForCausalLM"
    return PortSpec(
        model_type=snapshot.model_type,
        ref=snapshot.ref,
        class_prefix=prefix,
        architecture=architecture,
        processor_class=type(processor).__name__,
        config_class=type(snapshot.load_config()).__name__,
        transformers_version=transformers.__version__,
        mmport_version=__version__,
        modalities=(),
        encoder_reason="no model file is generated for a processor called by a method of its own",
        notes=(
            f"{type(processor).__name__} is called through {entry.method}, not __call__; "
            "the image count is delegated to it at run time, and no model file is generated",
        ),
        trust_remote_code=snapshot.trust_remote_code,
        entry=entry,
    )


class _Tokenizer:
    """A tokenizer with no BOS, as OLMo's has none: Molmo pads EOS in front instead."""

    bos_token_id = None
    eos_token_id = 50279


def _reading(entry: EntryPointSpec) -> tuple:
    """What the port is built on: the method, the text around the prompt, the token first, where images go."""
    return (
        entry.method,
        entry.before,
        entry.after,
        entry.prepended,
        entry.items_index,
        entry.source,
    )


EXAMPLES = [
    valid(
        "molmo_reading_is_portable",
        _MOLMO,
        lambda snippet: _reading(_read(snippet.MolmoProcessor)),
        (
            "process",
            " User: ",
            " Assistant:",
            ("bos_token", "eos_token"),
            -1,
            snippet_line(_MOLMO, "def process("),
        ),
    ),
    valid(
        "molmo_without_bos_puts_eos_first",
        _MOLMO,
        lambda snippet: _first_token_id(_Tokenizer(), _read(snippet.MolmoProcessor)),
        50279,
    ),
    invalid(
        "a_processor_with_its_own_call_has_no_entry_point_to_port",
        """
        class LlavaProcessor:
            def __call__(self, images=None, text=None, **kwargs):
                return self.tokenizer(text, **kwargs)
        """,
        lambda snippet: _read(snippet.LlavaProcessor),
        refusal=AnalysisError,
        match="LlavaProcessor: no entry point of its own could be read",
    ),
    invalid(
        "a_prompt_helper_that_lowercases_is_not_ported",
        """
        class MolmoProcessor:
            def get_tokens_input(self, prompt):
                prompt = prompt.lower()
                return self.tokenizer.encode(prompt, add_special_tokens=False)

            def process(self, text=None, images=None, **kwargs):
                tokens = self.get_tokens_input(text)
                return self.image_processor.multimodal_preprocess(images=images, tokens=tokens)
        """,
        lambda snippet: _read(snippet.MolmoProcessor),
        refusal=AnalysisError,
        match="its prompt helper does more than put text around the prompt",
    ),
    invalid(
        "images_after_the_prompt_are_not_ported",
        """
        import numpy as np


        class MolmoProcessor:
            def get_tokens_input(self, prompt):
                prompt = "User: " + prompt + " Assistant:"
                return self.tokenizer.encode(prompt, add_special_tokens=False)

            def process(self, text=None, images=None, **kwargs):
                tokens = self.get_tokens_input(text)
                image_idx = [len(tokens)] * len(images)
                out = self.image_processor.multimodal_preprocess(images=images, image_idx=image_idx, tokens=tokens)
                bos = self.tokenizer.bos_token_id or self.tokenizer.eos_token_id
                out["input_ids"] = np.pad(out["input_ids"], [[1, 0]], constant_values=bos)
                return out
        """,
        lambda snippet: _read(snippet.MolmoProcessor),
        refusal=AnalysisError,
        match="only images inserted at the start",
    ),
]
