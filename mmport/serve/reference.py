"""HF's side of ``verify --serve``: greedy ``generate`` on the probe prompts.

The probes are few and small: per modality the port handles, two prompts
with the snapshot's placeholder for it around text and one seeded noise item
each, written to files so the engine in the other environment reads the very
same data: an image as PNG; a video's frames as ``.npy`` (``(frames, height,
width, 3)`` uint8, as vLLM's loader decodes them) beside the metadata that
loader gives, HF told not to sample frames again; an audio's samples as
``.npy`` at the feature extractor's rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmport.hf.processor import mm_outputs
from mmport.runtime.device import placement
from mmport.runtime.hf_model import HFModel

__all__ = [
    "Generation",
    "ServeProbe",
    "hf_generate",
    "make_serve_probes",
    "probe_inputs",
]

# (width, height) of each probe's image: one landscape, one portrait.
_PROBE_SIZES = ((96, 64), (40, 120))
# Per video probe: (frames, width, height), at _VIDEO_FPS.
_VIDEO_PROBES = ((4, 64, 48), (8, 48, 64))
# Not 2 fps: Qwen2.5-VL's temporal positions scale by temporal_patch_size / fps,
# which is 1 at 2 fps, so a class dropping `second_per_grid_ts` would pass there.
_VIDEO_FPS = 3.0
# Per audio probe: its length in seconds.
_AUDIO_SECONDS = (1.0, 2.5)


@dataclass(frozen=True)
class ServeProbe:
    """One prompt and the item files it carries (``videos``: ``(frames.npy, metadata)``)."""

    name: str
    prompt: str
    images: tuple[str, ...] = ()
    videos: tuple[tuple[str, dict], ...] = ()
    audios: tuple[str, ...] = ()
    sampling_rate: int | None = None

    @property
    def counts(self) -> dict[str, int]:
        """Items per modality."""
        return {
            "image": len(self.images),
            "video": len(self.videos),
            "audio": len(self.audios),
        }


@dataclass(frozen=True)
class Generation:
    """What one side generated for one probe."""

    prompt_ids: tuple[int, ...]
    tokens: tuple[int, ...]
    first_logprob: float | None
    # Each item's feature rows from HF's ``get_<modality>_features`` (one tensor per
    # item, in the prompt's order); None where HF's model has no such method.
    features: tuple[Any, ...] | None = None
    features_from: str = (
        ""  # HF's method they come from (LlavaModel.get_image_features)
    )


def _prompt(placeholder: str | None, index: int) -> str:
    """Text around one item; text only where HF's processor inserts the item's tokens itself (PaliGemma)."""
    this = " this" * index
    return (
        f"Describe{this} {placeholder} briefly:"
        if placeholder
        else f"Describe{this} briefly:"
    )


def make_serve_probes(
    placeholders: dict[str, str | None],
    directory: Path,
    seed: int,
    sampling_rate: int | None = None,
) -> list[ServeProbe]:
    """Two probes per modality in ``placeholders``, their items written under ``directory``.

    ``placeholders`` maps each modality the port handles to the text an
    item takes in a prompt (verify's ``HFReference.placeholders()``); None
    where HF's processor inserts the item's tokens itself. Audio is made at
    ``sampling_rate`` (the feature extractor's).
    """
    import numpy as np
    from PIL import Image

    from mmport.media import make_audio, make_video, video_metadata

    rng = np.random.default_rng(seed)
    probes = []
    if "image" in placeholders:
        for index, (width, height) in enumerate(_PROBE_SIZES):
            path = directory / f"probe-{index}.png"
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(path)
            probes.append(
                ServeProbe(
                    f"serve-{index} ({width}x{height})",
                    _prompt(placeholders["image"], index),
                    images=(str(path),),
                )
            )
    if "video" in placeholders:
        for index, (frames, width, height) in enumerate(_VIDEO_PROBES):
            path = directory / f"video-{index}.npy"
            np.save(path, make_video(frames, width, height, seed + index))
            metadata = video_metadata(frames, width, height, _VIDEO_FPS)
            probes.append(
                ServeProbe(
                    f"serve-video-{index} ({frames} frames {width}x{height})",
                    _prompt(placeholders["video"], index),
                    videos=((str(path), metadata),),
                )
            )
    if "audio" in placeholders and sampling_rate:
        for index, seconds in enumerate(_AUDIO_SECONDS):
            path = directory / f"audio-{index}.npy"
            np.save(path, make_audio(int(seconds * sampling_rate), seed + index))
            probes.append(
                ServeProbe(
                    f"serve-audio-{index} ({seconds:g} s)",
                    _prompt(placeholders["audio"], index),
                    audios=(str(path),),
                    sampling_rate=sampling_rate,
                )
            )
    return probes


def probe_inputs(processor, probe: ServeProbe):
    """HF's processor on one probe, called as verify calls it (mmport.hf.processor)."""
    import numpy as np
    from PIL import Image

    from mmport.hf.processor import call_processor

    images = [Image.open(path).convert("RGB") for path in probe.images]
    videos = [(np.load(path), metadata) for path, metadata in probe.videos]
    audios = [np.load(path) for path in probe.audios]
    # A processor naming `mm_token_type_ids` among the model's inputs but not
    # returning them by default (Cosmos3-Edge) is asked for them: HF's M-RoPE
    # model refuses media without them, as vLLM's engine never is.
    wanted = "mm_token_type_ids" in getattr(processor, "model_input_names", ())
    return call_processor(
        processor,
        probe.prompt,
        images,
        videos=videos,
        audios=audios,
        sampling_rate=probe.sampling_rate,
        **({"return_mm_token_type_ids": True} if wanted else {}),
    )


def hf_generate(
    checkpoint: Path, probes: list[ServeProbe], max_tokens: int, *, causal: bool = False
) -> list[Generation]:
    """HF ``generate`` (greedy) on each probe, with the model loaded from ``checkpoint`` as HF loads it.

    ``causal``: without the processor's ``token_type_ids``, from which HF builds
    the bidirectional attention over media positions of prefix-LM families
    (Gemma 3, PaliGemma); HF then attends causally everywhere, as an engine
    whose attention backend has no media-prefix mode does.
    """
    import torch
    from transformers import AutoConfig, AutoProcessor

    from mmport.runtime.hf_model import model_class

    processor = AutoProcessor.from_pretrained(checkpoint)
    model = (
        model_class(AutoConfig.from_pretrained(checkpoint))
        .from_pretrained(checkpoint, dtype=torch.float32)
        .eval()
    )
    encoders = HFModel(model, placement("cpu", "float32"))
    out = []
    for probe in probes:
        inputs = probe_inputs(processor, probe)
        features, source = _item_features(
            encoders, probe, mm_outputs(processor, inputs)
        )
        if causal:
            inputs.pop("token_type_ids", None)
        with torch.inference_mode():
            result = model.generate(
                **inputs,
                do_sample=False,
                max_new_tokens=max_tokens,
                output_scores=True,
                return_dict_in_generate=True,
            )
        prompt_ids = inputs["input_ids"][0].tolist()
        tokens = result.sequences[0, len(prompt_ids) :].tolist()
        first = (
            torch.log_softmax(result.scores[0][0].float(), dim=-1)[tokens[0]].item()
            if tokens
            else None
        )
        out.append(
            Generation(tuple(prompt_ids), tuple(tokens), first, features, source)
        )
    return out


def _item_features(
    encoders: HFModel, probe: ServeProbe, inputs: Any
) -> tuple[tuple[Any, ...] | None, str]:
    """HF's feature rows of the probe's one item (``get_<modality>_features`` on the
    multimodal tensors of HF's processor output) and the method they come from, or
    None where the probe holds other than one item or HF's model has no such method."""
    import torch

    modalities = [m for m, count in probe.counts.items() if count]
    if sum(probe.counts.values()) != 1 or not encoders.has_features(modalities[0]):
        return None, ""
    rows = torch.cat(encoders.features(modalities[0], inputs))
    return (rows,), encoders.features_source(modalities[0])
