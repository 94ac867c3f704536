"""What a port run returns, and the runner that drives a loaded port.

:class:`PortRunner` calls the port's processor exactly as vLLM's front end
does and converts vLLM's result into a plain :class:`PortOutput` that checks
compare without knowing which backend ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mmport.runtime.backends import Backend

__all__ = ["PortClasses", "PortOutput", "PortPlaceholder", "PortRunner"]


@dataclass(frozen=True)
class PortClasses:
    """The three classes a port file defines, and the module name it was loaded under."""

    info: type[Any]
    dummy_inputs: type[Any]
    processor: type[Any]
    module_name: str
    path: Path | None = None


@dataclass(frozen=True)
class PortPlaceholder:
    """One item's placeholder run: ``length`` prompt positions from ``offset``.

    ``is_embed`` marks the positions that receive an encoder embedding;
    ``None`` means all of them do.
    """

    offset: int
    length: int
    is_embed: tuple[bool, ...] | None

    @property
    def num_embeds(self) -> int:
        """How many embeddings the encoder must produce for this item."""
        return self.length if self.is_embed is None else sum(self.is_embed)


def _values_equal(a: Any, b: Any) -> bool:
    """Deep equality where tensors must match in dtype, shape and values."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (
            isinstance(a, Mapping)
            and isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(_values_equal(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_values_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if hasattr(a, "dtype") or hasattr(b, "dtype"):
        import torch

        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return type(a) is type(b) and bool((a == b).all())
    return bool(a == b)


@dataclass(eq=False)
class PortOutput:
    """What a port made of one prompt, in backend-neutral form.

    ``items[modality][i]`` maps each field key to item ``i``'s own value, as
    vLLM keeps it per item (``MultiModalKwargsItem.get_data()``): a batched
    field's row without the batch axis, a flat field's slice, a shared
    field's whole value. Batching items for the model stacks batched fields
    along a new first axis and concatenates flat ones.
    """

    prompt_token_ids: list[int]
    placeholders: dict[str, list[PortPlaceholder]]
    items: dict[str, list[dict[str, object]]]
    # Each item's hash, what vLLM keys its processor and encoder caches by.
    hashes: dict[str, list[str]] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PortOutput):
            return NotImplemented
        return (
            self.prompt_token_ids == other.prompt_token_ids
            and self.placeholders == other.placeholders
            and _values_equal(self.items, other.items)
        )


def _embed_mask(is_embed: Any) -> tuple[bool, ...] | None:
    return None if is_embed is None else tuple(bool(v) for v in is_embed.tolist())


class PortRunner:
    """A built port that processes prompts as its backend's vLLM does."""

    def __init__(self, processor: Any, backend: Backend) -> None:
        self._processor = processor
        self._backend = backend
        self._activate = backend.activate

    @property
    def tokenizer(self) -> Any:
        """The tokenizer the port's context uses."""
        with self._activate():
            return self._processor.info.get_tokenizer()

    @property
    def hf_processor(self) -> Any:
        """The HF processor as the port obtains it (``info.get_hf_processor()``)."""
        with self._activate():
            return self._processor.info.get_hf_processor()

    def supported_mm_limits(self) -> dict[str, int | None]:
        """The port's ``get_supported_mm_limits()``."""
        with self._activate():
            return dict(self._processor.info.get_supported_mm_limits())

    def adds_special_tokens(self) -> bool | None:
        """Whether the port tokenizes a request's text with special tokens (its ``get_default_tok_params``); None: not declared."""
        with self._activate():
            params = getattr(self._processor.info, "get_default_tok_params", None)
            if params is None:
                return None
            return bool(params().add_special_tokens)

    def process(
        self,
        prompt: str,
        mm_data: dict[str, list],
        settings: Mapping[str, object] | None = None,
    ) -> PortOutput:
        """Parse and validate ``mm_data``, then call the processor on ``prompt``.

        ``settings`` are the request's processor kwargs (vLLM's ``mm_processor_kwargs``),
        which reach the port as ``hf_processor_mm_kwargs``.

        vLLM's own errors propagate unchanged: the three count checks as
        ``RuntimeError``; a target found nowhere (not even in text) as vLLM's
        ``AssertionError("Failed to apply prompt replacement ...")``.
        """
        with self._activate():
            items = self._processor.info.parse_mm_data(mm_data)
            return self._to_output(
                self._processor(
                    prompt, items, hf_processor_mm_kwargs=dict(settings or {})
                )
            )

    def dummy(
        self, seq_len: int, mm_counts: dict[str, int]
    ) -> tuple[str, dict[str, list]]:
        """The builder's dummy text and dummy data (values as the builder returned them)."""
        builder = self._processor.dummy_inputs
        with self._activate():
            text = builder.get_dummy_text(mm_counts)
            data = builder.get_dummy_mm_data(seq_len, mm_counts, self._dummy_options())
        return text, dict(data)

    def dummy_output(self, seq_len: int, mm_counts: dict[str, int]) -> PortOutput:
        """The dummy inputs run through ``apply``, as vLLM's profiler does (without its padding)."""
        with self._activate():
            inputs = self._processor.get_dummy_inputs(
                seq_len, mm_counts, self._dummy_options()
            )
            timing = self._backend.vllm_module("multimodal.processing").TimingContext(
                enabled=False
            )
            return self._to_output(self._processor.apply(inputs, timing))

    def _dummy_options(self) -> Any:
        # No per-modality caps: the builder's own worst case, as by default in vLLM.
        return self._backend.vllm_module("config.multimodal").MultiModalDummyOptions()

    def _to_output(self, result: Mapping[str, Any]) -> PortOutput:
        placeholders = {
            modality: [
                PortPlaceholder(r.offset, r.length, _embed_mask(r.is_embed))
                for r in ranges
            ]
            for modality, ranges in result["mm_placeholders"].items()
        }
        items = {
            modality: [dict(item.get_data()) for item in modality_items]
            for modality, modality_items in result["mm_kwargs"].items()
        }
        hashes = {m: list(h) for m, h in (result.get("mm_hashes") or {}).items()}
        return PortOutput(list(result["prompt_token_ids"]), placeholders, items, hashes)
