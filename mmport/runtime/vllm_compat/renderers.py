"""Tokenization parameters of vLLM 0.33 (``vllm.renderers.TokenizeParams``).

A processor tokenizes a text prompt with ``info.default_tok_params``; the
parameters turn into ``tokenizer.encode`` keyword arguments through
:meth:`TokenizeParams.get_encode_kwargs`. Only the part a processing port can
observe is reproduced: the encode arguments and ``with_kwargs``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from .exceptions import VLLMValidationError

__all__ = ["TokenizeParams"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenizeParams:
    """How prompts are tokenized: length budget, truncation and special tokens.

    ``max_total_tokens`` is the model's context length; with no explicit
    truncation, encoding stops one token past it so that an over-long prompt
    is still detectable as over-long.
    """

    max_total_tokens: int | None
    max_output_tokens: int | None = 0
    pad_prompt_tokens: int | None = None
    truncate_prompt_tokens: int | None = None
    truncation_side: Literal["left", "right"] | None = None
    do_lower_case: bool = False
    add_special_tokens: bool = True
    needs_detokenization: bool = False

    def __post_init__(self) -> None:
        if self.truncation_side not in (None, "left", "right"):
            raise VLLMValidationError(
                "`truncation_side` must be either 'left' or 'right'.",
                parameter="truncation_side",
                value=self.truncation_side,
            )
        total, output = self.max_total_tokens, self.max_output_tokens
        if total is not None and output is not None and output > total:
            raise VLLMValidationError(
                f"max_output_tokens={output} cannot be greater than max_total_tokens={total}.",
                parameter="max_output_tokens",
                value=output,
            )
        limit, keep = self.max_input_tokens, self.truncate_prompt_tokens
        if limit is not None and keep is not None and keep > limit:
            raise VLLMValidationError(
                f"truncate_prompt_tokens={keep} cannot be greater than max_total_tokens = {limit}.",
                parameter="truncate_prompt_tokens",
                value=keep,
            )

    @property
    def max_input_tokens(self) -> int | None:
        """The most prompt tokens allowed: the full context length."""
        return self.max_total_tokens

    @property
    def max_truncation_tokens(self) -> int | None:
        """The length truncation may cut a prompt to (one less when output is wanted)."""
        if self.max_input_tokens is None:
            return None
        if self.max_output_tokens == 0:
            return self.max_input_tokens
        return max(0, self.max_input_tokens - 1)

    def with_kwargs(self, **tokenization_kwargs: Any) -> TokenizeParams:
        """A copy updated from HF-style tokenizer kwargs (``add_special_tokens``, ``truncation``...).

        Unknown kwargs are logged and ignored, as vLLM does.
        """
        kwargs = dict(tokenization_kwargs)
        has_max_length = "max_length" in kwargs
        max_length = kwargs.pop("max_length", self.max_input_tokens)
        updated: dict[str, Any] = {
            name: kwargs.pop(name, getattr(self, name))
            for name in (
                "pad_prompt_tokens",
                "truncate_prompt_tokens",
                "truncation_side",
                "do_lower_case",
                "add_special_tokens",
                "needs_detokenization",
            )
        }
        # Falsy values (padding=False, truncation=False) leave the current
        # setting alone, exactly as vLLM reads them.
        if padding := kwargs.pop("padding", None):
            if padding == "max_length":
                updated["pad_prompt_tokens"] = max_length
            elif padding == "do_not_pad":
                updated["pad_prompt_tokens"] = None
            else:
                kwargs["padding"] = padding
        if truncation := kwargs.pop("truncation", None):
            if truncation in (True, "longest_first"):
                updated["truncate_prompt_tokens"] = max_length
            elif truncation == "do_not_truncate":
                updated["truncate_prompt_tokens"] = None
            else:
                kwargs["truncation"] = truncation
        if kwargs:
            logger.warning(
                "Ignoring tokenization arguments vLLM does not support: %s", kwargs
            )
        output = self.max_output_tokens
        if (
            has_max_length
            and self.max_total_tokens is not None
            and max_length is not None
        ):
            output = self.max_total_tokens - max_length
        return TokenizeParams(
            max_total_tokens=self.max_total_tokens, max_output_tokens=output, **updated
        )

    def get_encode_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``tokenizer.encode`` under these parameters."""
        max_length = self.truncate_prompt_tokens
        if max_length is not None and max_length < 0:
            max_length = self.max_truncation_tokens
        elif max_length is None and self.max_input_tokens is not None:
            # One past the limit: long enough to tell that a prompt is too
            # long, short enough not to tokenize a huge text in full.
            max_length = self.max_input_tokens + 1
        if self.truncation_side is not None and self.truncate_prompt_tokens is not None:
            # An explicit side needs the whole sequence; it is cut afterwards.
            return {"truncation": False, "add_special_tokens": self.add_special_tokens}
        return {
            "truncation": max_length is not None,
            "max_length": max_length,
            "add_special_tokens": self.add_special_tokens,
        }
