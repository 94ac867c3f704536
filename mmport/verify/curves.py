"""Count curves: HF's and the port's count for one item alone, over a sweep of item sizes.

A wrong count rule has a shape that a plot shows at a glance: off by one
everywhere (two parallel lines), right for square images only (the 1:1 panel
agrees, the 2:1 and 1:2 panels part), capped too early (the port's line goes
flat where HF's climbs). Each modality is swept over a fixed set of items,
each costing one HF call and one port call::

    curves = count_curves(session)
    curves["image"].points[0]
    # CurvePoint(group="square (1:1)", item="a 16×16 image", x=256, hf=576, port=577)

An item HF rejects has no count to draw and is left out; one the port raises
on is kept with ``port=None`` and the port's words.
"""

from __future__ import annotations

import math

from mmport.errors import FOREIGN_ERRORS, one_line
from mmport.verify.probes import Item
from mmport.verify.report import CountCurve, CurvePoint

__all__ = ["MAX_POINTS", "count_curves", "sweep"]

# The most items one modality's sweep holds: each is an HF call, and a large one is slow.
MAX_POINTS = 24
# Image areas (px²), from a thumbnail to a photo, at each aspect ratio (width:height):
# a rule that swaps width and height agrees on the square panel only.
IMAGE_AREAS = (16**2, 48**2, 112**2, 224**2, 336**2, 560**2, 896**2, 1600**2)
IMAGE_RATIOS = {"square (1:1)": 1.0, "wide (2:1)": 2.0, "tall (1:2)": 0.5}
# Video frame counts (odd and even, past a temporal patch or two) at a small and a common frame size.
VIDEO_FRAMES = (1, 2, 3, 4, 6, 8, 12, 16)
VIDEO_SIZES = ((64, 64), (224, 224))
VIDEO_FPS = 2.0
# Seconds of audio: a fraction of a second to three 30 s windows, with both sides of the first edge.
AUDIO_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 29.9, 30.1, 45.0, 60.0, 90.0)
X_LABELS = {
    "image": "image area (px², log scale)",
    "video": "frames",
    "audio": "seconds",
}


def sweep(modality: str) -> list[tuple[str, float, Item]]:
    """The items a modality's curve is drawn over: ``(panel, x, item)``, at most :data:`MAX_POINTS`."""
    if modality == "image":
        points = []
        for group, ratio in IMAGE_RATIOS.items():
            for area in IMAGE_AREAS:
                width, height = (
                    max(1, round(math.sqrt(area * ratio))),
                    max(1, round(math.sqrt(area / ratio))),
                )
                points.append(
                    (group, float(width * height), Item("image", (width, height)))
                )
        return points
    if modality == "video":
        return [
            (f"{w}×{h} frames", float(n), Item("video", (w, h), n, VIDEO_FPS))
            for w, h in VIDEO_SIZES
            for n in VIDEO_FRAMES
        ]
    return [("audio", s, Item("audio", seconds=s)) for s in AUDIO_SECONDS]


def count_curves(session) -> dict[str, CountCurve]:
    """Per modality HF handles and the port declares: both counts over :func:`sweep`.

    ``session`` is a :class:`~mmport.verify.session.Session`; HF counts
    each item alone (its embedding token in the minimal prompt that carries
    the item), the port the embedding positions of its placeholder for that
    prompt and item.
    """
    modalities = [m for m in session.hf.modalities if m in session.limits]
    return {modality: _curve(session, modality) for modality in modalities}


def _curve(session, modality: str) -> CountCurve:
    embed_id = session.hf.modalities[modality].embed_id
    points = []
    for group, x, item in sweep(modality)[:MAX_POINTS]:
        try:
            alone = session.hf.single(item)
        except FOREIGN_ERRORS:
            continue  # HF rejects the item: there is no count to hold the port to
        port, error = _port_count(session, item, alone.prompt)
        points.append(
            CurvePoint(
                group, item.describe(), x, alone.input_ids.count(embed_id), port, error
            )
        )
    return CountCurve(modality, X_LABELS[modality], modality == "image", tuple(points))


def _port_count(session, item: Item, prompt: str) -> tuple[int | None, str]:
    """The port's embedding positions for ``item`` alone, or ``None`` and what it raised."""
    try:
        output = session.port(prompt, [item])
    except FOREIGN_ERRORS as exc:
        return None, one_line(exc)
    return sum(ph.num_embeds for ph in output.placeholders.get(item.modality, [])), ""
