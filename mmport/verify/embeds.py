"""verify's ``embeds`` check: items given to the port as precomputed embeddings.

vLLM's users may send an item's encoder output instead of the item
(``image_embeds`` and kin, with ``--enable-mm-embeds``); the port must place
it as HF places the item itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from mmport.errors import one_line
from mmport.verify.checks import check_tokens
from mmport.verify.report import CheckResult, Failure

if TYPE_CHECKING:
    from mmport.verify.session import Session

__all__ = ["check_embeddings"]


def check_embeddings(session: Session, result: CheckResult, hidden_size: int) -> None:
    """Per modality the port declares: an item given as precomputed embeddings gets HF's tokens for the item.

    The embeddings have as many rows as HF gives the item positions (the
    shape of the encoder's output) and seeded values; the prompt, the
    placeholder and the port's ``<modality>_embeds`` field must follow. A
    port that does not take a modality's embeddings is named, not failed.
    """
    refused = []
    generator = torch.Generator().manual_seed(0)
    for modality in session.hf.modalities:
        if modality not in session.limits:
            continue
        item = session.hf.reference_items(modality)[0]
        try:
            expected = session.hf.single(item)
        except Exception:
            continue  # HF refuses the reference item: the probes judged this modality
        count = expected.input_ids.count(session.hf.modalities[modality].embed_id)
        embeds = torch.randn(count, hidden_size, generator=generator)
        try:
            actual = session.runner.process(expected.prompt, {modality: [embeds]})
        except Exception as exc:
            refused.append(f"{modality} ({one_line(exc)})")
            continue
        result.runs += 1
        name = f"{modality} embeddings"
        check_tokens(result, name, expected.input_ids, actual.prompt_token_ids)
        given = (actual.items.get(modality) or [{}])[0].get(f"{modality}_embeds")
        if given is None or not torch.equal(torch.as_tensor(given).float(), embeds):
            result.failures.append(Failure(name, f"the port's {modality}_embeds field does not hold the embeddings given"))
    if refused:
        result.summary = "the port does not take embeddings of: " + "; ".join(refused)
        if not result.runs:
            result.skipped = result.summary
