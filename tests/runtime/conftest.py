"""Fixtures for the runtime tests: a synthetic LLaVA snapshot and small test ports.

The small ports share one prelude (an info class and a dummy builder over
LLaVA's real HF processor) and differ only in their processor class, so each
case shows exactly the prompt-update feature it exercises. Their token count
per image is the port's own choice (``TOKENS_PER_IMAGE``): these ports test
the runtime's mechanics, not parity with HF.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

PRELUDE = """
from collections.abc import Mapping

import torch
from vllm.multimodal.inputs import MultiModalFieldConfig
from vllm.multimodal.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptUpdateDetails,
)

TOKENS_PER_IMAGE = 4
MAX_IMAGES = None


class Info(BaseProcessingInfo):
    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": MAX_IMAGES}

    def image_token_id(self) -> int:
        return self.get_hf_processor().image_token_id


class Dummy(BaseDummyInputsBuilder[Info]):
    def get_dummy_text(self, mm_counts):
        return self.info.get_hf_processor().image_token * mm_counts.get("image", 0)

    def get_dummy_mm_data(self, seq_len, mm_counts, mm_options):
        count = mm_counts.get("image", 0)
        return {"image": self._get_dummy_images(width=32, height=32, num_images=count)}
"""

# Processor classes, one per runtime feature; each pairs with PRELUDE.
PORT_CASES: dict[str, str] = {
    "replace": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                return [PromptReplacement("image", [image], [image] * TOKENS_PER_IMAGE)]
    """,
    "insert_start": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                return [PromptInsertion("image", PromptIndexTargets.start(), [image] * TOKENS_PER_IMAGE)]
    """,
    "insert_prefix": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                bos = self.info.get_tokenizer().bos_token_id
                target = PromptIndexTargets.prefix([bos])
                return [PromptInsertion("image", target, [image] * TOKENS_PER_IMAGE)]
    """,
    "insert_end": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                return [PromptInsertion("image", PromptIndexTargets.end(), [image] * TOKENS_PER_IMAGE)]
    """,
    # Newlines wrap each image's tokens; only the image tokens get embeddings.
    "select_token_id": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                newline = self.info.get_tokenizer().convert_tokens_to_ids("\\n")
                full = [newline] + [image] * TOKENS_PER_IMAGE + [newline]
                return [PromptReplacement("image", [image], PromptUpdateDetails.select_token_id(full, image))]
    """,
    # The target spells "<image>" character by character, so it never matches
    # the prompt's single <image> token: only the decode/re-encode path finds it.
    "text_fallback": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                spelled = self.info.get_tokenizer().convert_tokens_to_ids(list("<image>"))
                return [PromptReplacement("image", spelled, [image] * TOKENS_PER_IMAGE)]
    """,
    # pixel_values split into per-channel planes (flat) plus one shared tensor;
    # pixel_values itself is not listed, so it must be dropped.
    "flat_and_shared": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _postprocess_hf_mm_data(self, mm_inputs, hf_processor_mm_kwargs, processed_data):
                pixels = processed_data["pixel_values"]
                processed_data["planes"] = pixels.flatten(0, 1)
                processed_data["planes_per_image"] = torch.full((len(pixels),), pixels.shape[1])
                processed_data["channel_means"] = torch.tensor([0.5, 0.25, 0.125])
                return processed_data

            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                sizes = hf_inputs.get("planes_per_image", torch.empty(0, dtype=torch.long))
                return {
                    "planes": MultiModalFieldConfig.flat_from_sizes("image", sizes),
                    "planes_per_image": MultiModalFieldConfig.batched("image"),
                    "channel_means": MultiModalFieldConfig.shared("image", len(sizes)),
                }

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                return [PromptReplacement("image", [image], [image] * TOKENS_PER_IMAGE)]
    """,
    # Broken on purpose: each triggers one of vLLM's three count checks.
    "no_fields": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                image = self.info.image_token_id()
                return [PromptReplacement("image", [image], [image] * TOKENS_PER_IMAGE)]
    """,
    "no_updates": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                return []
    """,
    "empty_replacement": """
        class Processor(BaseMultiModalProcessor[Info]):
            def _get_mm_fields_config(self, hf_inputs, hf_processor_mm_kwargs):
                return {"pixel_values": MultiModalFieldConfig.batched("image")}

            def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
                return [PromptReplacement("image", [self.info.image_token_id()], [])]
    """,
}


def port_source(case: str, **settings: object) -> str:
    """The full source of test port ``case``; ``settings`` re-assign prelude constants."""
    overrides = "".join(f"{name} = {value!r}\n" for name, value in settings.items())
    return PRELUDE + overrides + "\n\n" + textwrap.dedent(PORT_CASES[case])


@pytest.fixture(scope="session")
def llava_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic LLaVA snapshot, built offline (in a private cache unless one is set)."""
    from mmport.sources import resolve

    with pytest.MonkeyPatch.context() as patch:
        if not os.environ.get("MMPORT_CACHE"):
            patch.setenv("MMPORT_CACHE", str(tmp_path_factory.mktemp("mmport-cache")))
        return resolve("llava").path


@pytest.fixture(scope="session")
def llava_port_file() -> Path:
    """The hand-written LLaVA port."""
    return Path(__file__).parents[1] / "ports" / "llava_handwritten.py"


@pytest.fixture
def write_port(tmp_path: Path) -> Callable[..., Path]:
    """Write test port ``case`` (see :data:`PORT_CASES`) to a file and return its path."""

    def write(case: str, **settings: object) -> Path:
        path = tmp_path / f"{case}.py"
        path.write_text(port_source(case, **settings))
        return path

    return write
