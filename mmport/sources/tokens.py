"""A tiny, real tokenizer for synthetic snapshots, as strict as a checkpoint's where a port can tell.

The vocabulary is the family's kind of BPE: the text model's own tokenizer
class (``Qwen2Tokenizer``, ``GemmaTokenizer``...) lends its normalizer,
pre-tokenizer, decoder, byte fallback and BOS rule when it is a BPE
tokenizer; otherwise a byte-level BPE that adds a BOS, as Llama-style
tokenizers do. On top of the base alphabet it holds, as single tokens with
the merges that build them:

- whitespace runs (``"\\n\\n\\n\\n"``, ``"    "``), which every real vocabulary
  holds, so that the newlines a processor writes around an item merge with
  the prompt's, or with the next item's, exactly as on a checkpoint::

      "<end_of_image>\\n\\n" + "\\n\\n<start_of_image>"  →  [..., "\\n\\n\\n\\n", ...]

- the ordinary text the processor writes around placeholders (``texts``);

plus the special tokens the processor needs, each at the id the model config
expects (``image_token_index`` → ``<image>``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmport.errors import FOREIGN_ERRORS

__all__ = ["WHITESPACE_RUNS", "TokenPlan", "tokenizer_family", "write_tokenizer"]

# Runs of whitespace real vocabularies hold as one token (Gemma's and Qwen's hold
# far longer runs; eight is enough for any probe's boundary).
WHITESPACE_RUNS = tuple(char * n for char in ("\n", " ", "\t") for n in range(1, 9))

BASE_SPECIALS = {
    "unk_token": "<unk>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "pad_token": "<pad>",
}

# Special-token attributes every tokenizer class knows by name; they are set
# directly, not as ``extra_special_tokens`` (which would shadow them).
STANDARD_SPECIALS = frozenset({*BASE_SPECIALS, "sep_token", "cls_token", "mask_token"})


@dataclass(frozen=True)
class TokenPlan:
    """Which special tokens the tokenizer holds and where, and whose kind it is.

    ``named`` maps a tokenizer attribute (``image_token``) to its text;
    ``anonymous`` are further special strings the processor uses;
    ``fixed_ids`` pins token texts to ids the model config names;
    ``texts`` is ordinary text the processor writes around items (merged into
    whole tokens); ``family`` the text model's tokenizer class, if it has one;
    ``adds_bos`` overrides the family's BOS rule (a processor that writes the
    BOS itself, as Emu3's does, comes with a tokenizer that adds none).
    """

    named: Mapping[str, str]
    anonymous: tuple[str, ...]
    fixed_ids: Mapping[str, int]
    texts: tuple[str, ...] = ()
    family: type[Any] | None = None
    # Whether the tokenizer puts a BOS before every text; None: as the family does.
    adds_bos: bool | None = None

    def all_specials(self) -> list[str]:
        """Every special token text, base tokens first, without duplicates."""
        ordered = [*BASE_SPECIALS.values(), *self.named.values(), *self.anonymous]
        return list(dict.fromkeys(ordered))


def tokenizer_family(config: Any) -> type[Any] | None:
    """The BPE tokenizer class of the text model's family, or None when it has none to lend.

    transformers' ``TOKENIZER_MAPPING_NAMES`` is read for the text model, then
    the model: ``Qwen2VLConfig`` → ``Qwen2Tokenizer`` (no BOS, Qwen's
    pre-tokenizer); ``Gemma3Config`` → ``GemmaTokenizer``. Where both map to
    nothing or to the generic ``TokenizersBackend``, the family is the nearest
    ancestor's in the model's modular file (:mod:`mmport.sources.ancestry`):
    ``Gemma4Config`` maps nothing, but ``class Gemma4TextModel(Gemma3TextModel)``
    (``models/gemma4/modular_gemma4.py:1280`` in 5.24) makes it ``gemma3``'s, so
    ``GemmaTokenizer``. The first tokenizer class named decides: a class that
    builds no BPE (WordPiece, or one that needs its files) lends nothing. A
    Llama text model maps to nothing and derives from nothing (None).
    """
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    for model_type in _family_model_types(config):
        name = TOKENIZER_MAPPING_NAMES.get(model_type)
        if name and name != "TokenizersBackend":
            return _bpe_family(name)
    return None


def _family_model_types(config: Any) -> Iterator[str]:
    """The text model's model_type, the model's, then each modular ancestor's, nearest first."""
    from mmport.sources.ancestry import ancestor_model_types, text_model_ancestry

    text_config = config.get_text_config()
    yield from (text_config.model_type, config.model_type)
    for step in text_model_ancestry(text_config):
        yield from ancestor_model_types(step)


def _bpe_family(name: str) -> type[Any] | None:
    """Tokenizer class ``name``, when it builds a BPE tokenizer of its own (see :func:`_default_backend`)."""
    from transformers import TokenizersBackend
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    family = tokenizer_class_from_name(name)
    if (
        family is None
        or family is TokenizersBackend
        or not issubclass(family, TokenizersBackend)
    ):
        return None
    return family if _default_backend(family) is not None else None  # type: ignore[arg-type]  # a class is hashable; mypy misreads type[...] against Hashable


@functools.cache
def _default_backend(family: type[Any]) -> Any | None:
    """A default instance's ``tokenizers.Tokenizer``, when the class builds a BPE one mmport can imitate.

    A synthetic vocabulary holds whole pieces and the family's BOS/EOS, no
    more: a class whose BPE marks word ends (CLIP's ``</w>``) or whose
    post-processor writes more than a BOS and an EOS around every text
    (Whisper's task prefix) would turn the synthetic text into unknown tokens, so it lends nothing.
    """
    try:
        backend = family()._tokenizer
    except FOREIGN_ERRORS:  # a class that needs its files to exist: it lends nothing
        return None
    if type(backend.model).__name__ != "BPE" or getattr(
        backend.model, "end_of_word_suffix", None
    ):
        return None
    return backend if _adds_bos_eos_only(backend.post_processor) else None


def _adds_bos_eos_only(post_processor: Any) -> bool:
    """True for no post-processor, or one that puts at most a BOS and an EOS around a text (Roberta's ``<s>…</s>``)."""
    if post_processor is None:
        return True
    state = json.loads(post_processor.__getstate__())
    if state.get("type") in ("RobertaProcessing", "BertProcessing"):
        return True
    if state.get("type") != "TemplateProcessing":
        return False
    return sum("SpecialToken" in piece for piece in state.get("single", [])) <= 2


@dataclass(frozen=True)
class _Pipeline:
    """How text becomes BPE pieces, and back: the family's, or byte-level."""

    normalizer: Any
    pre_tokenizer: Any
    decoder: Any
    byte_level: bool
    byte_fallback: bool
    adds_bos: bool

    def pieces(self, text: str) -> list[str]:
        """The pre-tokenized pieces of ``text``, in the BPE model's alphabet (``"\\n\\n"`` → ``"ĊĊ"``)."""
        normalized = self.normalizer.normalize_str(text) if self.normalizer else text
        if self.pre_tokenizer is None:
            return [normalized]
        return [piece for piece, _ in self.pre_tokenizer.pre_tokenize_str(normalized)]

    def alphabet(self) -> list[str]:
        """The single-symbol tokens every text spells out of."""
        from tokenizers.pre_tokenizers import ByteLevel

        if self.byte_level:
            return sorted(ByteLevel.alphabet())
        printable = [chr(c) for c in range(33, 127)] + ["\n", "\t", "▁"]
        return [f"<0x{b:02X}>" for b in range(256)] + printable


def _pipeline(family: type | None) -> _Pipeline:
    from tokenizers import decoders, pre_tokenizers

    backend = _default_backend(family) if family is not None else None
    if family is None or backend is None:
        # Llama-style: byte-level, and a BOS before every prompt.
        return _Pipeline(
            None,
            pre_tokenizers.ByteLevel(add_prefix_space=False),
            decoders.ByteLevel(),
            True,
            False,
            True,
        )
    byte_level = "ByteLevel" in repr(backend.pre_tokenizer) + repr(backend.decoder)
    adds_bos = _family_bos_default(family) is not None
    return _Pipeline(
        backend.normalizer,
        backend.pre_tokenizer,
        backend.decoder,
        byte_level,
        bool(backend.model.byte_fallback),
        adds_bos,
    )


def _family_bos_default(family: type[Any]) -> Any:
    import inspect

    parameter = inspect.signature(family.__init__).parameters.get("bos_token")
    return parameter.default if parameter is not None else BASE_SPECIALS["bos_token"]


def _bpe_split(piece: str, ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """``piece`` split as BPE splits it under ``ranks``: the lowest-ranked adjacent pair merges first."""
    symbols = list(piece)
    while len(symbols) > 1:
        pairs = [
            (ranks.get((a, b)), i)
            for i, (a, b) in enumerate(itertools.pairwise(symbols))
            if (a, b) in ranks
        ]
        if not pairs:
            break
        _, at = min(pairs)
        symbols[at : at + 2] = [symbols[at] + symbols[at + 1]]
    return symbols


def _merges_for(pieces: list[str]) -> list[tuple[str, str]]:
    """Merges under which each piece is one token, learned as BPE training would: shorter pieces first.

    Each new merge joins the first two symbols a piece still splits into, so a
    run of four newlines is ``"\\n\\n" + "\\n\\n"`` once ``"\\n\\n"`` is a token.
    """
    ranks: dict[tuple[str, str], int] = {}
    for piece in sorted(dict.fromkeys(pieces), key=len):
        symbols = _bpe_split(piece, ranks)
        while len(symbols) > 1:
            ranks[(symbols[0], symbols[1])] = len(ranks)
            symbols = _bpe_split(piece, ranks)
    return list(ranks)


def _assign_ids(fixed: Mapping[str, int], texts: list[str]) -> dict[str, int]:
    """Give fixed tokens their ids, then fill the lowest free ids in order."""
    vocab = dict(fixed)
    taken = set(vocab.values())
    next_id = 0
    for text in texts:
        if text in vocab:
            continue
        while next_id in taken:
            next_id += 1
        vocab[text] = next_id
        taken.add(next_id)
    return vocab


def _build(plan: TokenPlan, pipeline: _Pipeline) -> Any:
    """The ``tokenizers.Tokenizer``: the family's pipeline over a vocabulary of merged runs and texts."""
    from tokenizers import AddedToken, Tokenizer, models, processors

    alphabet = pipeline.alphabet()
    pieces = [
        p
        for text in (*WHITESPACE_RUNS, *plan.texts)
        for p in pipeline.pieces(text)
        if len(p) > 1
    ]
    merges = _merges_for([p for p in pieces if all(c in alphabet for c in p)])
    merged = [a + b for a, b in merges]
    vocab = _assign_ids(plan.fixed_ids, [*plan.all_specials(), *alphabet, *merged])
    unk = BASE_SPECIALS["unk_token"]
    model = models.BPE(
        vocab=vocab,
        merges=merges,
        unk_token=unk,
        byte_fallback=pipeline.byte_fallback,
        fuse_unk=pipeline.byte_fallback,
    )
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = pipeline.normalizer
    tokenizer.pre_tokenizer = pipeline.pre_tokenizer
    tokenizer.decoder = pipeline.decoder
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in plan.all_specials()]
    )
    if pipeline.adds_bos:
        bos = BASE_SPECIALS["bos_token"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, tokenizer.token_to_id(bos))],
        )
    return tokenizer


def write_tokenizer(plan: TokenPlan, directory: Path) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``."""
    pipeline = _pipeline(plan.family)
    if plan.adds_bos is not None:
        pipeline = dataclasses.replace(pipeline, adds_bos=plan.adds_bos)
    _build(plan, pipeline).save(str(directory / "tokenizer.json"))
    standard = {
        name: text for name, text in plan.named.items() if name in STANDARD_SPECIALS
    }
    extra = {
        name: text for name, text in plan.named.items() if name not in STANDARD_SPECIALS
    }
    config = {
        "tokenizer_class": plan.family.__name__ if plan.family else "TokenizersBackend",
        "add_bos_token": pipeline.adds_bos,
        "add_eos_token": False,
        "model_max_length": 1_000_000,
        **BASE_SPECIALS,
        **standard,
        "extra_special_tokens": extra,
    }
    if not pipeline.adds_bos and plan.adds_bos is None:
        config["bos_token"] = None  # Qwen-style: the family names no BOS
    (directory / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2) + "\n"
    )
