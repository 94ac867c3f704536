"""The HF side of verify: the real processor, called the way a user would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mmport.analyzers.fields import call_processor, mm_outputs, token_id_of
from mmport.analyzers.ownprompt import run_recording_prompt, writes_own_prompt
from mmport.analyzers.wrappers import wrapped_placeholder
from mmport.sources import Snapshot

__all__ = ["HFOutput", "HFReference"]


@dataclass
class HFOutput:
    """What the HF processor returned for one prompt and its items."""

    input_ids: list[int]
    mm: dict[str, torch.Tensor]
    inputs: dict[str, torch.Tensor]  # everything the HF model takes (labels aside)
    # The text a vLLM request carries for this input: the probe's prompt, or
    # the prompt HF wrote itself when it takes no text beside images (ColPali).
    prompt: str


class HFReference:
    """Calls the snapshot's HF processor; learns its placeholder convention."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.processor = snapshot.load_processor()
        self.token = str(self.processor.image_token)
        self.token_id = token_id_of(self.processor)
        # Positions the model fills with image features; the placeholder may be another token.
        embed_id = snapshot.model_image_token_id()
        self.embed_id = self.token_id if embed_id is None else embed_id
        self.writes_own_prompt = writes_own_prompt(self.processor)
        self._counts: dict[tuple[int, int], int] = {}
        # What one image takes in a prompt HF accepts (wrapped, where HF demands it).
        self.placeholder = None if self._inserts_items() else wrapped_placeholder(self.processor)

    def _inserts_items(self) -> bool:
        """True when HF puts image tokens in a prompt that has no placeholder.

        Such processors insert the image tokens themselves (PaliGemma); for
        them probes carry no placeholder text. Others either reject such a
        prompt or (some 5.x releases) silently drop the image.
        """
        from mmport.verify.probes import make_image

        try:
            output = self.run("probe", [make_image(8, 8, 0)])
        except (ValueError, TypeError, IndexError):
            return False
        return self.embed_id in output.input_ids

    def run(self, prompt: str, images: list) -> HFOutput:
        """Process one prompt with ``images``; raises what HF raises.

        A processor that writes its own prompt takes the images alone (the
        probe's text has no place in HF's answer) or the text alone, and
        answers several images with several samples, which no one vLLM
        request holds: that is refused here like any input HF rejects.
        """
        if self.writes_own_prompt:
            if len(images) > 1:
                raise ValueError(f"{type(self.processor).__name__} makes each image its own sample, not one prompt")
            prompt, out = run_recording_prompt(self.processor, prompt, images)
        else:
            out = call_processor(self.processor, prompt, images)
        inputs = {k: v for k, v in out.items() if k != "labels" and isinstance(v, torch.Tensor)}
        return HFOutput(out["input_ids"][0].tolist(), mm_outputs(self.processor, out), inputs, prompt)

    def single(self, image: Any) -> HFOutput:
        """HF on one item alone (the minimal prompt that carries it)."""
        return self.run(self.placeholder or "", [image])

    def item_count(self, image: Any) -> int:
        """Embedding positions HF gives this item alone (cached per size: counts never depend on pixels)."""
        if image.size not in self._counts:
            self._counts[image.size] = self.single(image).input_ids.count(self.embed_id)
        return self._counts[image.size]
