"""LLaVA (1.5-style) multi-modal processing for vLLM 0.33, written by hand.

A test fixture: a correct port that ``mmport verify`` must pass and that
both runtime backends must process identically. Only the processing side is
here (no model class).

Every count is read off the HF processor the snapshot ships, not off
constants: ``LlavaProcessor`` expands each ``<image>`` into one token per
vision patch of the *processed* image, plus ``num_additional_image_tokens``
(a CLS token, if counted), minus one when ``vision_feature_select_strategy``
is ``"default"`` (the CLS feature is dropped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from transformers import BatchFeature, LlavaConfig
from transformers.models.llava import LlavaProcessor
from vllm.config.multimodal import MultiModalDummyOptions
from vllm.inputs import MultiModalDataDict
from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from vllm.multimodal.parse import (
    ImageEmbeddingItems,
    ImageProcessorItems,
    ImageSize,
    MultiModalDataItems,
)
from vllm.multimodal.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    PromptReplacement,
    PromptUpdate,
)


def _as_height_width(size: Mapping[str, int]) -> tuple[int, int] | None:
    """``(height, width)`` of an explicit size dict, or ``None`` for a shortest-edge one."""
    if "height" in size and "width" in size:
        return size["height"], size["width"]
    return None


class LlavaProcessingInfo(BaseProcessingInfo):
    """Token counts and limits of LLaVA, read from its HF processor."""

    def get_hf_config(self) -> LlavaConfig:
        return self.ctx.get_hf_config(LlavaConfig)

    def get_hf_processor(self, **kwargs: object) -> LlavaProcessor:
        """The snapshot's ``LlavaProcessor``, with ``patch_size`` filled in when missing."""
        processor = self.ctx.get_hf_processor(LlavaProcessor, **kwargs)
        if processor.patch_size is None:
            # Some checkpoints leave patch_size out of processor_config.json;
            # the vision tower's patch size is the one HF would need.
            processor.patch_size = self.get_hf_config().vision_config.patch_size
        return processor

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": None}

    def get_image_token_id(self) -> int:
        """The id of ``<image>``, as the HF processor encodes it."""
        processor = self.get_hf_processor()
        token_id = getattr(processor, "image_token_id", None)
        if token_id is None:
            token_id = self.get_tokenizer().convert_tokens_to_ids(processor.image_token)
        return token_id

    def get_processed_image_size(
        self, *, image_width: int, image_height: int
    ) -> ImageSize:
        """The size of ``pixel_values`` for an input image, following the image processor's steps."""
        image_processor = self.get_hf_processor().image_processor
        height, width = image_height, image_width
        if getattr(image_processor, "do_pad", False):
            # LLaVA's processor pads to a square before resizing.
            height = width = max(height, width)
        if getattr(image_processor, "do_resize", True):
            size = dict(image_processor.size)
            explicit = _as_height_width(size)
            if explicit is not None:
                height, width = explicit
            else:
                # Shortest edge to the target, the other edge scaled and truncated.
                target = size["shortest_edge"]
                short, long = min(height, width), max(height, width)
                scaled = int(target * long / short)
                height, width = (
                    (target, scaled) if height <= width else (scaled, target)
                )
        if getattr(image_processor, "do_center_crop", False):
            height, width = _as_height_width(dict(image_processor.crop_size))
        return ImageSize(width=width, height=height)

    def get_num_image_tokens(self, *, image_width: int, image_height: int) -> int:
        """Placeholder tokens the HF processor writes for one image of this size."""
        processor = self.get_hf_processor()
        size = self.get_processed_image_size(
            image_width=image_width, image_height=image_height
        )
        patch = processor.patch_size
        num_tokens = (size.height // patch) * (
            size.width // patch
        ) + processor.num_additional_image_tokens
        if processor.vision_feature_select_strategy == "default":
            num_tokens -= 1
        return num_tokens

    def get_image_size_with_most_features(self) -> ImageSize:
        """A square image at the vision tower's resolution (every size crops alike)."""
        side = self.get_hf_config().vision_config.image_size
        return ImageSize(width=side, height=side)

    def get_max_image_tokens(self) -> int:
        """The most placeholder tokens one image can take."""
        width, height = self.get_image_size_with_most_features()
        return self.get_num_image_tokens(image_width=width, image_height=height)


class LlavaDummyInputsBuilder(BaseDummyInputsBuilder[LlavaProcessingInfo]):
    """Worst-case profiling inputs: one ``<image>`` per image, images at full size."""

    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return self.info.get_hf_processor().image_token * mm_counts.get("image", 0)

    def get_dummy_mm_data(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: MultiModalDummyOptions,
    ) -> MultiModalDataDict:
        width, height = self.info.get_image_size_with_most_features()
        images = self._get_dummy_images(
            width=width,
            height=height,
            num_images=mm_counts.get("image", 0),
            overrides=mm_options.get("image"),
        )
        return {"image": images}


class LlavaMultiModalProcessor(BaseMultiModalProcessor[LlavaProcessingInfo]):
    """Each ``<image>`` in the prompt becomes one ``<image>`` per image feature."""

    def _get_mm_fields_config(
        self,
        hf_inputs: BatchFeature,
        hf_processor_mm_kwargs: Mapping[str, object],
    ) -> Mapping[str, MultiModalFieldConfig]:
        # One image per row of pixel_values (or of precomputed embeddings).
        return {
            "pixel_values": MultiModalFieldConfig.batched("image"),
            "image_embeds": MultiModalFieldConfig.batched("image"),
        }

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        image_token_id = self.info.get_image_token_id()

        def image_tokens(item_idx: int) -> list[int]:
            images = mm_items.get_items(
                "image", (ImageEmbeddingItems, ImageProcessorItems)
            )
            if isinstance(images, ImageEmbeddingItems):
                return [image_token_id] * images.get_feature_size(item_idx)
            size = images.get_image_size(item_idx)
            count = self.info.get_num_image_tokens(
                image_width=size.width, image_height=size.height
            )
            return [image_token_id] * count

        return [
            PromptReplacement(
                modality="image", target=[image_token_id], replacement=image_tokens
            )
        ]
