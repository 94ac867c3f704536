"""HF's side of ``verify --serve``: greedy ``generate`` on the probe prompts.

The probes are few and small: a prompt with the snapshot's image
placeholder around text, one seeded noise image each (PNG files, so the
engine in the other environment reads the very same pixels).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Generation", "ServeProbe", "hf_generate", "make_serve_probes"]

# (width, height) of each probe's image: one landscape, one portrait.
_PROBE_SIZES = ((96, 64), (40, 120))


@dataclass(frozen=True)
class ServeProbe:
    """One prompt and the image files it carries."""

    name: str
    prompt: str
    images: tuple[str, ...]


@dataclass(frozen=True)
class Generation:
    """What one side generated for one probe."""

    prompt_ids: tuple[int, ...]
    tokens: tuple[int, ...]
    first_logprob: float | None


def make_serve_probes(
    placeholder: str | None, directory: Path, seed: int
) -> list[ServeProbe]:
    """One probe per size in ``_PROBE_SIZES``, images written under ``directory``.

    ``placeholder`` is the text an image takes in a prompt (verify's
    ``HFReference.placeholders()``); None when HF's processor inserts the
    image tokens itself (PaliGemma), so the prompt is text only.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    probes = []
    for index, (width, height) in enumerate(_PROBE_SIZES):
        path = directory / f"probe-{index}.png"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(
            path
        )
        prompt = (
            f"Describe{' this' * index} {placeholder} briefly:"
            if placeholder
            else f"Describe{' this' * index} briefly:"
        )
        probes.append(
            ServeProbe(f"serve-{index} ({width}x{height})", prompt, (str(path),))
        )
    return probes


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
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor

    from mmport.runtime.hf_model import model_class

    processor = AutoProcessor.from_pretrained(checkpoint)
    model = (
        model_class(AutoConfig.from_pretrained(checkpoint))
        .from_pretrained(checkpoint, dtype=torch.float32)
        .eval()
    )
    out = []
    for probe in probes:
        images = [Image.open(path).convert("RGB") for path in probe.images]
        inputs = processor(
            text=[probe.prompt], images=images or None, return_tensors="pt"
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
        out.append(Generation(tuple(prompt_ids), tuple(tokens), first))
    return out
