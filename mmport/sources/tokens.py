"""A tiny, real tokenizer for synthetic snapshots.

The vocabulary is byte-level BPE with no merges (every byte is a token), plus
the special tokens the processor needs, each placed at the id the model config
expects (``image_token_index`` → ``<image>``), plus ``"\\n"`` and ``"\\n\\n"``
as whole tokens because some ports look them up by text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TokenPlan", "write_tokenizer"]

# Whole-text tokens real vocabularies hold and ports look up by text.
TEXT_TOKENS = ("\n", "\n\n")

BASE_SPECIALS = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}

# Special-token attributes every tokenizer class knows by name; they are set
# directly, not as ``extra_special_tokens`` (which would shadow them).
STANDARD_SPECIALS = frozenset({*BASE_SPECIALS, "sep_token", "cls_token", "mask_token"})


@dataclass(frozen=True)
class TokenPlan:
    """Which special tokens the tokenizer holds and where.

    ``named`` maps a tokenizer attribute (``image_token``) to its text;
    ``anonymous`` are further special strings the processor uses;
    ``fixed_ids`` pins token texts to ids the model config names.
    """

    named: Mapping[str, str]
    anonymous: tuple[str, ...]
    fixed_ids: Mapping[str, int]

    def all_specials(self) -> list[str]:
        """Every special token text, base tokens first, without duplicates."""
        ordered = [*BASE_SPECIALS.values(), *self.named.values(), *self.anonymous]
        return list(dict.fromkeys(ordered))


def _assign_ids(plan: TokenPlan, alphabet: list[str]) -> dict[str, int]:
    """Give fixed tokens their ids, then fill the lowest free ids in order."""
    vocab = dict(plan.fixed_ids)
    taken = set(vocab.values())
    next_id = 0
    for text in [*plan.all_specials(), *alphabet]:
        if text in vocab:
            continue
        while next_id in taken:
            next_id += 1
        vocab[text] = next_id
        taken.add(next_id)
    return vocab


def write_tokenizer(plan: TokenPlan, directory: Path) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``."""
    import json

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers.pre_tokenizers import ByteLevel

    vocab = _assign_ids(plan, sorted(ByteLevel.alphabet()))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=BASE_SPECIALS["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in plan.all_specials()])
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t in TEXT_TOKENS])
    bos = BASE_SPECIALS["bos_token"]
    bos_id = tokenizer.token_to_id(bos)
    # Llama- and Gemma-style tokenizers prepend BOS; processors rely on it.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    standard = {name: text for name, text in plan.named.items() if name in STANDARD_SPECIALS}
    extra = {name: text for name, text in plan.named.items() if name not in STANDARD_SPECIALS}
    config = {
        "tokenizer_class": "TokenizersBackend",
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": 1_000_000,
        **BASE_SPECIALS,
        **standard,
        "extra_special_tokens": extra,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
