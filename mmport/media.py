"""Seeded media for probes and analysis: images, videos with their metadata, audio.

Every item is made from a seed, so a probe is reproducible and items differ
from each other (per-item outputs must not be confusable). Videos come as
vLLM's loader hands them on: decoded frames (``(frames, height, width, 3)``
uint8) plus a metadata dict (``fps``, ``frames_indices``,
``total_num_frames``, ``duration``, ``do_sample_frames=False``: vLLM samples
frames itself). Audio is mono float32 at a given sampling rate. An item may
also be given as its embeddings: :data:`EMBEDDING_FIELDS` names the fields.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EMBEDDING_FIELDS",
    "MODALITIES",
    "make_audio",
    "make_image",
    "make_video",
    "video_metadata",
]

# The modalities mmport ports, in the order they are reported.
MODALITIES = ("image", "video", "audio")

# The fields of an item given to a port as a dict of precomputed embeddings, and
# their roles in vLLM's terms: the embeddings ("values") and the item's size, which
# lays out its tokens as HF lays out those of an item of that size ("metadata").
# The size is what HF's own token API takes (``image_sizes``, ``video_sizes``,
# ``audio_lengths`` of ``_get_num_multimodal_tokens``), and a video's frame rate.
EMBEDDING_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "image": (("image_embeds", "values"), ("image_size", "metadata")),
    "video": (
        ("video_embeds", "values"),
        ("video_size", "metadata"),
        ("video_fps", "metadata"),
    ),
    "audio": (("audio_embeds", "values"), ("audio_length", "metadata")),
}


def make_image(width: int, height: int, seed: int) -> Any:
    """A seeded RGB noise image of the given size (a PIL image)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(
        rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB"
    )


def make_video(num_frames: int, width: int, height: int, seed: int) -> Any:
    """Seeded RGB noise frames, ``(num_frames, height, width, 3)`` uint8, as vLLM decodes a video."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (num_frames, height, width, 3), dtype=np.uint8)


def video_metadata(
    num_frames: int, width: int, height: int, fps: float
) -> dict[str, Any]:
    """The metadata vLLM's video loader gives frames it sampled itself (every frame kept)."""
    return {
        "total_num_frames": num_frames,
        "fps": fps,
        "duration": num_frames / fps,
        "frames_indices": list(range(num_frames)),
        "video_backend": "opencv",
        "height": height,
        "width": width,
        "do_sample_frames": False,
    }


def make_audio(num_samples: int, seed: int) -> Any:
    """Seeded mono noise, float32 in [-0.5, 0.5)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return (rng.random(num_samples, dtype=np.float32) - 0.5).astype(np.float32)
