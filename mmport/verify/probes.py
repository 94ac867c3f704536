"""Seeded probe cases: item counts, sizes, aspect ratios and text positions."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Probe", "make_probes", "make_image"]

WORDS = ("describe", "the", "picture", "what", "is", "shown", "here", "left", "right", "and", "a", "cat")
# (width, height): tiny, small, square, huge, and extreme aspect ratios both ways.
SIZES = ((1, 1), (7, 5), (64, 64), (224, 224), (333, 517), (1600, 1200), (1024, 96), (96, 1024), (2000, 40))


@dataclass(frozen=True)
class Probe:
    """One probe: text pieces around ``len(sizes)`` items."""

    name: str
    sizes: tuple[tuple[int, int], ...]
    pieces: tuple[str, ...]
    seed: int

    def prompt(self, placeholder: str | None) -> str:
        """The prompt text; items sit between pieces, or nowhere when inserted."""
        if placeholder is None:
            return "".join(self.pieces)
        parts = [self.pieces[0]]
        for piece in self.pieces[1:]:
            parts += [placeholder, piece]
        return "".join(parts)

    def images(self) -> list:
        """The probe's images (seeded noise, so items differ)."""
        return [make_image(w, h, self.seed * 100 + i) for i, (w, h) in enumerate(self.sizes)]


def make_image(width: int, height: int, seed: int):
    """A seeded RGB noise image of the given size."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))


# The most items one probe carries.
MAX_PROBE_ITEMS = 3


def make_probes(count: int, seed: int, max_items: int = MAX_PROBE_ITEMS) -> list[Probe]:
    """``count`` probes; the first ones cover 0, 1 and several items deterministically."""
    rng = random.Random(seed)
    probes = []
    for index in range(count):
        num_items = index if index <= max_items else rng.randint(0, max_items)
        sizes = tuple(rng.choice(SIZES) for _ in range(num_items))
        # Text before, between and after items: one piece more than items.
        pieces = tuple(_text(rng) for _ in range(num_items + 1))
        probes.append(Probe(f"probe{index}", sizes, pieces, seed * 1000 + index))
    return probes
