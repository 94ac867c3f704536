"""The HF side of verify: the real processor, called the way a user would.

:class:`HFReference` learns, per modality the processor handles, the text an
item takes in a prompt (its placeholder, wrapped where HF demands it, or none
where HF inserts items itself) and the token the model embeds the item at.
It then runs prompts with items of any modality and counts each item's
embedding positions alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from mmport.errors import FOREIGN_ERRORS, BadReferenceError
from mmport.hf.entry import entry_point
from mmport.hf.layout import template_layouts, usable_layout
from mmport.hf.modalities import (
    SUB_PROCESSORS,
    handled_modalities,
    most_written,
    refused_modalities,
)
from mmport.hf.ownprompt import run_recording_prompt, writes_own_prompt
from mmport.hf.processor import call_processor, mm_outputs, token_id_of
from mmport.hf.wrappers import wrapped_placeholder
from mmport.sources import Snapshot
from mmport.sources.snapshot import named_token_ids
from mmport.verify.probes import Item, media_of
from mmport.verify.settings import Setting

__all__ = ["HFOutput", "HFReference", "ModalityRef"]


@dataclass
class HFOutput:
    """What the HF processor returned for one prompt and its items."""

    input_ids: list[int]
    mm: dict[str, torch.Tensor]
    inputs: dict[str, torch.Tensor]  # everything the HF model takes (labels aside)
    # The text a vLLM request carries for this input: the probe's prompt, or
    # the prompt HF wrote itself when it takes no text beside images (ColPali).
    prompt: str


@dataclass(frozen=True)
class ModalityRef:
    """How one modality appears in HF's prompts and outputs."""

    modality: str
    token_attr: (
        str  # the processor attribute of the placeholder token (``image_token``)
    )
    placeholder: (
        str | None
    )  # the text one item takes; None where HF inserts items itself
    embed_id: int  # the id at the item's embedding positions in HF's ``input_ids``


def sampling_rate_of(processor: Any) -> int | None:
    """The rate the processor's audio side takes waveforms at, if it has one."""
    for attribute in SUB_PROCESSORS["audio"]:
        rate = getattr(getattr(processor, attribute, None), "sampling_rate", None)
        if isinstance(rate, int):
            return rate
    return None


class HFReference:
    """Calls the snapshot's HF processor; learns its placeholder convention per modality."""

    def __init__(
        self,
        snapshot: Snapshot,
        base_setting: dict[str, Any] | None = None,
        chat_layouts: Mapping[str, str] | None = None,
    ) -> None:
        self.snapshot = snapshot
        # What vLLM's chat front end writes per item for this model (its registered class), if known.
        self.chat_layouts = dict(chat_layouts or {})
        # Settings every call carries (``--processor-kwargs``), as an engine started with them would.
        self.base_setting = dict(base_setting or {})
        self.processor = snapshot.load_processor()
        self.writes_own_prompt = writes_own_prompt(self.processor)
        self.sampling_rate = sampling_rate_of(self.processor)
        self._counts: dict[tuple, int] = {}
        # Per modality, the most items a prompt holds with HF processing each as alone (company.py).
        self._alone_up_to: dict[str, int | None] = {}
        self.modalities: dict[str, ModalityRef] = {}
        # Sides HF cannot take even one ordinary item of are not judged (inspect says why).
        self.refused = refused_modalities(self.processor)
        for modality in handled_modalities(self.processor):
            if modality not in self.refused:
                self.modalities[modality] = self._learn(modality)
        if self.refused and not self.modalities:
            # Nothing left to judge a port on: the snapshot, not the port, is at fault.
            reasons = "; ".join(self.refused.values())
            raise BadReferenceError(
                f"{snapshot.path}: {type(self.processor).__name__} cannot be a reference: {reasons}"
            )

    # The image-only view older callers use.
    @property
    def placeholder(self) -> str | None:
        """The image placeholder (None when HF inserts images)."""
        return (
            self.modalities["image"].placeholder if "image" in self.modalities else None
        )

    @property
    def embed_id(self) -> int:
        """The id images are embedded at."""
        return self.modalities["image"].embed_id

    @property
    def token_id(self) -> int:
        """The image placeholder's own id."""
        return token_id_of(self.processor)

    def spell(self, ids: list[int]) -> list[str]:
        """The tokenizer's text for each id (``<image>``, ``▁cat``), or nothing when it cannot say."""
        tokenizer = getattr(self.processor, "tokenizer", None)
        if tokenizer is None:
            return []
        try:
            return [str(token) for token in tokenizer.convert_ids_to_tokens(list(ids))]
        except FOREIGN_ERRORS:  # no tokenizer, or ids it does not know: the ids alone still show the difference
            return []

    def placeholders(self) -> dict[str, str | None]:
        """Modality → the text an item takes in a prompt."""
        return {m: ref.placeholder for m, ref in self.modalities.items()}

    def _learn(self, modality: str) -> ModalityRef:
        token_attr = f"{modality}_token"
        item = _example(modality)
        configured = self.snapshot.model_token_id(modality)
        own_id = (
            token_id_of(self.processor, token_attr)
            if getattr(self.processor, token_attr, None) is not None
            else None
        )
        if configured is None and own_id is None and entry_point(type(self.processor)):
            # Called by a method of its own, naming no token (Molmo): HF inserts the item.
            return ModalityRef(
                modality, token_attr, None, token_id_of(self.processor, token_attr)
            )
        placeholder = (
            None
            if self._inserts(modality, item, configured, own_id)
            else wrapped_placeholder(self.processor, token_attr)
        )
        placeholder = self._chat_layout(modality, placeholder, item)
        embed_id = configured if configured is not None else own_id
        if modality != "image":
            # HF may write another token for the item than the config names for it
            # (GLM-4.1V embeds video frames at the image token): the one it writes most.
            embed_id = self._expanded_id(placeholder, item, embed_id)
        if embed_id is None:
            # No id marks the item's positions, so no check could find them: the snapshot is at fault.
            raise BadReferenceError(
                f"{self.snapshot.path}: no token marks a {modality} item: the config names no {modality}_token_id "
                f"and {type(self.processor).__name__} has no {token_attr}; name the token in config.json"
            )
        return ModalityRef(modality, token_attr, placeholder, embed_id)

    def _chat_layout(
        self, modality: str, placeholder: str | None, item: Item
    ) -> str | None:
        """The item's text as a chat prompt writes it, where HF takes it; else ``placeholder``.

        The checkpoint's chat template first, then what vLLM writes for the
        model (:mod:`mmport.hf.layout`): probes are the prompts vLLM hands a port.
        """
        token = getattr(self.processor, f"{modality}_token", None)
        from_template = (
            template_layouts(self.processor, {modality: str(token)})
            if token is not None
            else {}
        )
        for layout in (from_template.get(modality), self.chat_layouts.get(modality)):
            layout = usable_layout(layout, placeholder)
            if layout is None:
                continue
            try:
                self.run(layout, [item])
            except FOREIGN_ERRORS:
                # HF refuses the layout: the placeholder HF takes stays
                continue
            return layout
        return placeholder

    def _inserts(
        self, modality: str, item: Item, configured: int | None, own_id: int | None
    ) -> bool:
        """True when HF puts the item's tokens in a prompt that has no placeholder.

        Such processors insert the tokens themselves (PaliGemma); for them
        probes carry no placeholder text. Others either reject such a prompt
        or (some 5.x releases) silently drop the item.
        """
        expected = configured if configured is not None else own_id
        try:
            output = self.run("probe", [item])
        except (ValueError, TypeError, IndexError, KeyError):
            return False
        return expected is not None and expected in output.input_ids

    def _expanded_id(
        self, placeholder: str | None, item: Item, expected: int | None
    ) -> int | None:
        """``expected`` if HF writes it for one item, else the id HF writes most (InternVL's video frames are image tokens)."""
        try:
            ids = self.run(placeholder or "", [item]).input_ids
            bare = set(self.run("", []).input_ids) if placeholder is not None else set()
        except (
            FOREIGN_ERRORS
        ):  # HF refuses the item or text alone: the expected id stays
            return expected
        if expected in ids:
            return expected
        named = named_token_ids(self.snapshot.load_config())
        return most_written(ids, bare, named) or expected

    def run(
        self, prompt: str, items: list[Any], setting: Setting | None = None
    ) -> HFOutput:
        """Process one prompt with ``items`` (probe :class:`Item` values, or images); raises what HF raises.

        With a ``setting``, HF is called with its kwargs, as vLLM calls it for a
        request that carries them (on top of ``self.base_setting``, the settings
        pinned for every call).

        A processor that writes its own prompt takes the images alone (the
        probe's text has no place in HF's answer) or the text alone, and
        answers several images with several samples, which no one vLLM
        request holds: that is refused here like any input HF rejects.
        """
        items = [
            item if isinstance(item, Item) else _image_item(item) for item in items
        ]
        media = _media(items, self.sampling_rate)
        kwargs = {**self.base_setting, **(setting.kwargs if setting else {})}
        if self.writes_own_prompt:
            if len(items) > 1:
                raise ValueError(
                    f"{type(self.processor).__name__} makes each image its own sample, not one prompt"
                )
            prompt, out = run_recording_prompt(
                self.processor, prompt, media["images"], **kwargs
            )
        else:
            out = call_processor(
                self.processor,
                prompt,
                **media,
                sampling_rate=self.sampling_rate,
                **kwargs,
            )
        inputs = {
            k: v
            for k, v in out.items()
            if k != "labels" and isinstance(v, torch.Tensor)
        }
        return HFOutput(
            out["input_ids"][0].tolist(),
            mm_outputs(self.processor, out),
            inputs,
            prompt,
        )

    def single(self, item: Any, setting: Setting | None = None) -> HFOutput:
        """HF on one item alone (the minimal prompt that carries it)."""
        item = item if isinstance(item, Item) else _image_item(item)
        return self.run(
            self.modalities[item.modality].placeholder or "", [item], setting
        )

    def example(self, modality: str) -> Item:
        """An ordinary item of ``modality``, as the reference learns its conventions on."""
        return _example(modality)

    def alone_up_to(self, modality: str) -> int | None:
        """The most items of ``modality`` a prompt holds with HF processing each as alone (None: no count probed changes it).

        Run once per modality, when a probe first shows HF counting items
        otherwise together (see :mod:`mmport.verify.company`).
        """
        from mmport.verify.company import alone_up_to

        if modality not in self._alone_up_to:
            self._alone_up_to[modality] = alone_up_to(self, modality)
        return self._alone_up_to[modality]

    def item_count(self, item: Any, setting: Setting | None = None) -> int:
        """Embedding positions HF gives this item alone (cached per count-deciding key: never the pixels)."""
        item = item if isinstance(item, Item) else _image_item(item)
        key = (item.key(), setting.key() if setting else "")
        if key not in self._counts:
            self._counts[key] = self.single(item, setting).input_ids.count(
                self.modalities[item.modality].embed_id
            )
        return self._counts[key]

    def kept_audio_seconds(self) -> float | None:
        """The longest audio HF keeps whole, where its feature extractor cuts longer ones to one window; else None.

        Whisper-style extractors pad or cut every audio to ``n_samples`` (30 s):
        HF counts a 45 s audio as it counts 30 s of it. What lies past the
        window is not what a request gets processed, and vLLM's ports may
        handle it otherwise (chunked, refused); probes stay within it.
        """
        if "audio" not in self.modalities or self.sampling_rate is None:
            return None
        if not hasattr(self, "_kept_audio"):
            self._kept_audio: float | None = None
            samples = next(
                (
                    getattr(getattr(self.processor, a, None), "n_samples", None)
                    for a in ("feature_extractor", "audio_processor")
                ),
                None,
            )
            if isinstance(samples, int) and samples > 0:
                window = samples / self.sampling_rate
                try:
                    cut = self.item_count(
                        Item("audio", seconds=window * 1.5)
                    ) == self.item_count(Item("audio", seconds=window))
                except FOREIGN_ERRORS:  # HF refuses the longer audio: it keeps no more than the window either
                    cut = True
                self._kept_audio = window if cut else None
        return self._kept_audio

    def telling_candidates(self, modality: str) -> list[Item]:
        """The reference items, and for images one of an odd size, smallest first: items a setting may count differently.

        The odd-sized image fits no patch grid: a setting that reshapes the
        grid (Video-LLaMA-3's ``merge_size`` on 16 px patches) may leave the
        counts of grid-aligned images as they were and change only its.
        """
        items = self.reference_items(modality)
        return (
            [items[0], Item("image", (333, 517)), *items[1:]]
            if modality == "image"
            else items
        )

    def reference_items(self, modality: str) -> list[Item]:
        """Items whose counts show whether a setting changes HF's count: a small and a large one, of two shapes."""
        return {
            "image": [Item("image", (224, 224)), Item("image", (1600, 1200))],
            "video": [
                Item("video", (64, 64), frames=4, fps=2.0),
                Item("video", (448, 256), frames=8, fps=2.0),
            ],
            "audio": [Item("audio", seconds=1.0), Item("audio", seconds=12.0)],
        }[modality]


def _media(items: list[Item], sampling_rate: int | None) -> dict[str, list]:
    """``call_processor``'s media arguments for ``items``: images, (frames, metadata) videos, waveforms."""
    media: dict[str, list] = {"images": [], "videos": [], "audios": []}
    for item in items:
        value = (
            item.picture if item.picture is not None else media_of(item, sampling_rate)
        )
        media[f"{item.modality}s" if item.modality != "audio" else "audios"].append(
            value
        )
    return media


def _image_item(image: Any) -> Item:
    """A picture as an image :class:`Item` whose media is that very picture."""
    return Item("image", tuple(image.size), picture=image)


def _example(modality: str) -> Item:
    """An ordinary item of ``modality`` for learning the conventions."""
    return {
        "image": Item("image", (8, 8)),
        "video": Item("video", (64, 64), frames=2, fps=2.0),
        "audio": Item("audio", seconds=1.0),
    }[modality]
