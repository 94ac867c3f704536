"""Seeded probe cases: items of every modality, their sizes, and text around them.

A probe is a prompt with items interleaved in text. Items are drawn per
modality the port handles: images from tiny to huge and extreme aspect
ratios; videos with odd and even frame counts, several sizes and frame
rates; audio from a fraction of a second to past one 30 s chunk. The first
probes are deterministic (no item, one item of each modality, several of
each, one of every modality together); the rest are random mixes::

    probes = make_probes(8, seed=0, limits={"image": None, "video": 2})
    probes[1].items  # (Item("image", (7, 5), ...),)
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mmport.media import MODALITIES, make_audio, make_image, make_video, video_metadata

__all__ = ["MAX_PROBE_ITEMS", "Item", "Probe", "make_probes", "media_of", "port_data"]

WORDS = (
    "describe",
    "the",
    "picture",
    "what",
    "is",
    "shown",
    "here",
    "left",
    "right",
    "and",
    "a",
    "cat",
)
# (width, height): tiny, small, square, huge, and extreme aspect ratios both ways.
SIZES = (
    (1, 1),
    (7, 5),
    (64, 64),
    (224, 224),
    (333, 517),
    (1600, 1200),
    (1024, 96),
    (96, 1024),
    (2000, 40),
)
# Videos cost frames × pixels: moderate sizes, odd and even frame counts, a range of rates.
VIDEO_SIZES = ((32, 32), (64, 48), (224, 224), (333, 517), (640, 360))
VIDEO_FRAMES = (1, 2, 3, 4, 5, 8)
VIDEO_FPS = (1.0, 2.0, 24.0, 30.0)
# Seconds of audio: a fraction of a second to past one 30 s window.
AUDIO_SECONDS = (0.05, 0.5, 1.0, 3.7, 10.0, 29.9, 31.5, 45.0)

# Whitespace a prompt puts beside an item: real tokenizers merge it with text an
# item begins or ends with (Gemma 3's newlines), which a port must follow.
SPACING = ("", " ", "\n", "\n\n")

# The most items one probe carries.
MAX_PROBE_ITEMS = 3


@dataclass(frozen=True)
class Item:
    """One probe item: its modality and what decides its count.

    ``size`` is ``(width, height)`` for images and videos; ``frames`` and
    ``fps`` are a video's; ``seconds`` an audio's length.
    """

    modality: str
    size: tuple[int, int] = (0, 0)
    frames: int = 0
    fps: float = 0.0
    seconds: float = 0.0
    seed: int = 0
    # An image given as a picture rather than drawn from the seed.
    picture: Any = field(default=None, compare=False, repr=False)

    def media(self, sampling_rate: int | None = None) -> Any:
        """The item as vLLM's loaders hand it on: an image, ``(frames, metadata)``, or a waveform."""
        width, height = self.size
        if self.picture is not None:
            return self.picture
        if self.modality == "image":
            return make_image(width, height, self.seed)
        if self.modality == "video":
            return make_video(self.frames, width, height, self.seed), video_metadata(
                self.frames, width, height, self.fps
            )
        return make_audio(
            max(1, round(self.seconds * (sampling_rate or 16_000))), self.seed
        )

    def key(self) -> tuple:
        """What decides the item's count (not its pixels or samples): equal keys, equal counts."""
        return (self.modality, self.size, self.frames, self.fps, self.seconds)

    def describe(self) -> str:
        """``a 333×517 image``, ``a 5-frame 64×48 video at 2 fps``, ``a 1.5 s audio``."""
        width, height = self.size
        if self.modality == "image":
            return f"a {width}×{height} image"
        if self.modality == "video":
            return f"a {self.frames}-frame {width}×{height} video at {self.fps:g} fps"
        return f"a {self.seconds:g} s audio"


@dataclass(frozen=True)
class Probe:
    """One probe: text pieces around ``len(items)`` items, in order."""

    name: str
    items: tuple[Item, ...]
    pieces: tuple[str, ...]
    seed: int

    @property
    def sizes(self) -> tuple[tuple[int, int], ...]:
        """The image sizes, in order (the image-only view older callers use)."""
        return tuple(item.size for item in self.items if item.modality == "image")

    def of(self, modality: str) -> tuple[Item, ...]:
        """This probe's items of ``modality``, in order."""
        return tuple(item for item in self.items if item.modality == modality)

    def prompt(self, placeholders: Mapping[str, str | None] | str | None) -> str:
        """The prompt text; an item sits between pieces as its modality's placeholder, or nowhere when inserted.

        ``placeholders`` maps modality to placeholder text (``None``: HF inserts
        the items itself); a plain string is the image placeholder.
        """
        if not isinstance(placeholders, Mapping):
            placeholders = {"image": placeholders}
        parts = [self.pieces[0]]
        for item, piece in zip(self.items, self.pieces[1:], strict=True):
            parts += [placeholders.get(item.modality) or "", piece]
        return "".join(parts)

    def images(self) -> list:
        """The probe's images (seeded noise, so items differ)."""
        return [item.media() for item in self.of("image")]

    def leading(self, item: Item, limit: int | None) -> Probe:
        """The same probe with ``item`` first: added, or (at the modality's ``limit``) in place of its first such item."""
        if limit is None or len(self.of(item.modality)) < limit:
            return Probe(self.name, (item, *self.items), ("", *self.pieces), self.seed)
        index = next(
            i for i, other in enumerate(self.items) if other.modality == item.modality
        )
        items = list(self.items)
        items[index] = item
        return Probe(self.name, tuple(items), self.pieces, self.seed)

    def without(self, dropped: set[int]) -> Probe:
        """The same probe with items at positions ``dropped`` left out (their text joined)."""
        items, pieces = [], [self.pieces[0]]
        for index, (item, piece) in enumerate(
            zip(self.items, self.pieces[1:], strict=True)
        ):
            if index in dropped:
                pieces[-1] = (pieces[-1] + " " + piece).strip()
            else:
                items.append(item)
                pieces.append(piece)
        return Probe(self.name, tuple(items), tuple(pieces), self.seed)


@functools.lru_cache(maxsize=64)
def media_of(item: Item, sampling_rate: int | None = None) -> Any:
    """``item.media(sampling_rate)``, made once: HF and the port get the very same arrays."""
    return item.media(sampling_rate)


def port_data(items: list[Item], sampling_rate: int | None) -> dict[str, list]:
    """The items as vLLM's loaders hand them to a port: images, ``(frames, metadata)``, ``(waveform, rate)``."""
    data: dict[str, list] = {}
    for item in items:
        media = (
            item.picture if item.picture is not None else media_of(item, sampling_rate)
        )
        data.setdefault(item.modality, []).append(
            (media, sampling_rate) if item.modality == "audio" else media
        )
    return data


def _text(rng: random.Random) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))
    return f"{rng.choice(SPACING)}{words}{rng.choice(SPACING)}"


def _pieces(rng: random.Random, count: int, edges: bool) -> tuple[str, ...]:
    """Text before, between and after ``count`` items; with ``edges``, the first item opens the prompt and
    the first two sit side by side (where tokenizers merge across items)."""
    pieces = [_text(rng) for _ in range(count + 1)]
    if edges and count:
        pieces[0] = ""
        if count > 1:
            pieces[1] = ""
    return tuple(pieces)


def _draw(
    modality: str, rng: random.Random, seed: int, frames: int | None = None
) -> Item:
    if modality == "image":
        return Item("image", rng.choice(SIZES), seed=seed)
    if modality == "video":
        return Item(
            "video",
            rng.choice(VIDEO_SIZES),
            frames or rng.choice(VIDEO_FRAMES),
            rng.choice(VIDEO_FPS),
            seed=seed,
        )
    return Item("audio", seconds=rng.choice(AUDIO_SECONDS), seed=seed)


def _plans(
    modalities: list[str], limits: Mapping[str, int | None]
) -> list[dict[str, int]]:
    """The deterministic first probes: nothing, one item per modality, several per modality, all together."""
    cap = {
        m: MAX_PROBE_ITEMS
        if (limit := limits.get(m)) is None
        else max(1, min(MAX_PROBE_ITEMS, limit))
        for m in modalities
    }
    plans: list[dict[str, int]] = [{}]
    if len(modalities) == 1:
        return plans + [{modalities[0]: n} for n in range(1, cap[modalities[0]] + 1)]
    plans += [{m: 1} for m in modalities]
    plans += [{m: cap[m]} for m in modalities if cap[m] > 1]
    return [*plans, dict.fromkeys(modalities, 1)]


def _random_plan(
    modalities: list[str], limits: Mapping[str, int | None], rng: random.Random
) -> dict[str, int]:
    plan = {}
    for modality in modalities:
        limit = limits.get(modality)
        cap = MAX_PROBE_ITEMS if limit is None else min(MAX_PROBE_ITEMS, limit)
        plan[modality] = rng.randint(0, max(0, cap))
    return plan


def make_probes(
    count: int,
    seed: int,
    max_items: int = MAX_PROBE_ITEMS,
    limits: Mapping[str, int | None] | None = None,
    audio_seconds: float | None = None,
) -> list[Probe]:
    """``count`` probes over the modalities of ``limits`` (modality → the port's item limit, None: unlimited).

    ``audio_seconds`` caps an audio's length at what HF keeps of it (one
    feature-extractor window), where it cuts longer audio.

    Without ``limits`` probes carry images only, at most ``max_items`` each.
    Several videos in one probe share a frame count: HF stacks one sample's
    videos, and ragged frame counts are a batching limit of HF's, not a
    property of the model.
    """
    limits = dict(limits) if limits is not None else {"image": max_items}
    modalities = [m for m in MODALITIES if m in limits]
    rng = random.Random(seed)
    plans = _plans(modalities, limits)
    probes = []
    for index in range(count):
        plan = (
            plans[index]
            if index < len(plans)
            else _random_plan(modalities, limits, rng)
        )
        frames = rng.choice(VIDEO_FRAMES)
        base = seed * 1000 + index
        items = [
            _draw(
                modality,
                rng,
                base * 100 + len(plan) * 10 + n,
                frames if plan[modality] > 1 else None,
            )
            for modality in modalities
            for n in range(plan.get(modality, 0))
        ]
        if audio_seconds is not None:
            items = [
                replace(i, seconds=min(i.seconds, audio_seconds))
                if i.modality == "audio"
                else i
                for i in items
            ]
        rng.shuffle(items)  # modalities interleaved in the prompt
        # Text before, between and after items: one piece more than items.
        pieces = _pieces(rng, len(items), edges=index < len(plans))
        probes.append(Probe(f"probe{index}", tuple(items), pieces, base))
    return probes
