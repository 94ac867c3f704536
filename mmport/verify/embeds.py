"""verify's ``embeds`` check: items given to the port as precomputed embeddings.

vLLM's users may send an item's encoder output instead of the item
(``image_embeds`` and kin, with ``--enable-mm-embeds``); the port must place
it as HF places the item itself. vLLM takes embeddings in two forms: a bare
tensor of rows, and a dict of tensors holding the rows beside what lays out
the item's tokens. verify offers each item in every form it knows:

- ``tensor``: the rows alone;
- ``sized``: the rows and the item's size (``image_size`` [height, width],
  ``video_size`` [frames, height, width] and ``video_fps``, ``audio_length``
  in samples: mmport's generated ports, see ``mmport.media.EMBEDDING_FIELDS``);
- ``outputs``: the rows and HF's own integer outputs for the item (a grid
  such as ``image_grid_thw``: vLLM's own Qwen-style ports).

In the dict forms the rows come as a list of one item's tensor (mmport's
ports); where the port refuses that, as the one tensor itself, the form
vLLM's documentation gives for one item (vLLM's Qwen-VL parsers take
nothing else).

A form the port refuses is named, not failed; every form it takes must give
HF's tokens and hold the rows given. A form that raises because the snapshot
lacks what real checkpoints carry cannot be judged (:mod:`mmport.verify.lacking`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from mmport.errors import FOREIGN_ERRORS, one_line
from mmport.media import EMBEDDING_FIELDS
from mmport.verify.checks import check_tokens
from mmport.verify.probes import Item
from mmport.verify.reference import HFOutput
from mmport.verify.report import CheckResult, Failure

if TYPE_CHECKING:
    from mmport.verify.session import Session

__all__ = ["check_embeddings"]


def _item_size(item: Item, sampling_rate: int | None) -> list[list[float]]:
    """The metadata values of ``item`` in the ``sized`` form, in EMBEDDING_FIELDS order."""
    width, height = item.size
    if item.modality == "image":
        return [[height, width]]
    if item.modality == "video":
        return [[item.frames, height, width], [item.fps]]
    return [[max(1, round(item.seconds * (sampling_rate or 16_000)))]]


def _sized(
    item: Item, embeds: torch.Tensor, expected: HFOutput, sampling_rate: int | None
) -> dict[str, object]:
    metadata = [
        key for key, role in EMBEDDING_FIELDS[item.modality] if role == "metadata"
    ]
    values = _item_size(item, sampling_rate)
    dtypes = {"video_fps": torch.float32}
    sized = {
        key: torch.tensor([value], dtype=dtypes.get(key, torch.int64))
        for key, value in zip(metadata, values, strict=False)
    }
    return {f"{item.modality}_embeds": [embeds], **sized}


def _outputs(
    item: Item, embeds: torch.Tensor, expected: HFOutput, sampling_rate: int | None
) -> dict[str, object] | None:
    """The rows beside HF's integer outputs for the item; None when HF gives it none."""
    grids = {
        k: v
        for k, v in expected.mm.items()
        if isinstance(v, torch.Tensor) and not v.is_floating_point() and v.dim() >= 1
    }
    if not grids:
        return None
    return {f"{item.modality}_embeds": [embeds], **grids}


FORMS: dict[str, Callable[..., object]] = {
    "tensor": lambda item, embeds, expected, rate: [embeds],
    "sized": _sized,
    "outputs": _outputs,
}


def check_embeddings(session: Session, result: CheckResult, hidden_size: int) -> None:
    """Per modality the port declares: an item given as precomputed embeddings gets HF's tokens for the item.

    The embeddings have as many rows as HF gives the item positions (the
    shape of the encoder's output) and seeded values; the prompt, the
    placeholder and the port's ``<modality>_embeds`` field must follow.
    Two reference items per modality, of different sizes, are offered in
    each form (see the module doc). A modality whose embeddings the port
    takes in no form is named, not failed.
    """
    refused: dict[str, list[str]] = {}
    taken: set[str] = set()
    generator = torch.Generator().manual_seed(0)
    for modality in session.hf.modalities:
        if modality not in session.limits:
            continue
        for item in session.hf.reference_items(modality):
            try:
                expected = session.hf.single(item)
            except FOREIGN_ERRORS:
                continue  # HF refuses the reference item: the probes judged this modality
            count = expected.input_ids.count(session.hf.modalities[modality].embed_id)
            embeds = torch.randn(count, hidden_size, generator=generator)
            for form, build in FORMS.items():
                data = build(item, embeds, expected, session.hf.sampling_rate)
                if data is None:
                    continue
                name = f"{modality} embeddings ({form}, {item.describe()})"
                actual, why = _offer(
                    session, result, name, expected.prompt, modality, data
                )
                if actual is None:
                    if why:
                        refused.setdefault(modality, []).append(f"{form}: {why}")
                    continue
                result.runs += 1
                taken.add(modality)
                check_tokens(result, name, expected.input_ids, actual.prompt_token_ids)
                given = (actual.items.get(modality) or [{}])[0].get(
                    f"{modality}_embeds"
                )
                if given is None or not torch.equal(
                    torch.as_tensor(given).float(), embeds
                ):
                    result.failures.append(
                        Failure(
                            name,
                            f"the port's {modality}_embeds field does not hold the embeddings given",
                            loudness="silent",
                            modalities=(modality,),
                        )
                    )
    untaken = [
        f"{modality} ({'; '.join(dict.fromkeys(reasons))})"
        for modality, reasons in refused.items()
        if modality not in taken
    ]
    if untaken:
        result.summary = "the port does not take embeddings of: " + "; ".join(untaken)
        if not result.runs:
            result.skipped = result.summary


def _offer(
    session: Session,
    result: CheckResult,
    name: str,
    prompt: str,
    modality: str,
    data: object,
) -> tuple[Any, str]:
    """The port's processing of ``prompt`` with ``data`` for ``modality``, or (None, why it
    refused; "" where the snapshot lacks what the form needs, so it cannot be judged).

    A dict form whose rows the port refuses as a list is offered again with the
    one tensor (see the module doc).
    """
    key = f"{modality}_embeds"
    offers = [data]
    if isinstance(data, dict) and isinstance(data.get(key), list):
        offers.append({**data, key: data[key][0]})
    why = ""
    for offer in offers:
        try:
            return session.runner.process(prompt, {modality: offer}), ""
        except FOREIGN_ERRORS as exc:
            # A form raising for what the snapshot lacks is not refused: it cannot be judged.
            if session.cannot_judge(result, name, exc):
                return None, ""
            why = why or one_line(exc)
    return None, why
