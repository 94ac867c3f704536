"""Local snapshots with real-world geometry, built from synthetic ones in code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mmport.sources import resolve


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _variant(model_type: str, directory: Path, *, processor=None, config=None) -> Path:
    """A copy of ``model_type``'s synthetic snapshot with its processor and/or model config edited."""
    shutil.copytree(resolve(model_type).path, directory)
    for name, change in (("processor_config.json", processor), ("config.json", config)):
        if change is not None:
            _edit(directory / name, change)
    return directory


def llava15_snapshot(directory: Path) -> Path:
    """LLaVA-1.5 style: CLIP at 336 px / patch 14, CLS counted, `default` strategy."""

    def processor(data):
        data["num_additional_image_tokens"] = 1
        data["vision_feature_select_strategy"] = "default"
        data["patch_size"] = 14
        data["image_processor"]["crop_size"] = {"height": 336, "width": 336}
        data["image_processor"]["size"] = {"shortest_edge": 336}

    def config(data):
        data["vision_config"].update(image_size=336, patch_size=14)

    return _variant("llava", directory, processor=processor, config=config)


def paligemma448_snapshot(directory: Path) -> Path:
    """PaliGemma at 448 px with 1024 image tokens."""

    def processor(data):
        data["image_processor"]["size"] = {"height": 448, "width": 448}
        data["image_processor"]["image_seq_length"] = 1024

    def config(data):
        data["vision_config"].update(image_size=448)
        data["text_config"]["num_image_tokens"] = 1024

    return _variant("paligemma", directory, processor=processor, config=config)


def gemma3_896_snapshot(directory: Path) -> Path:
    """Gemma 3 (4B and up): SigLIP at 896 px / patch 14, pooled to 256 tokens per image."""

    def processor(data):
        data["image_processor"]["size"] = {"height": 896, "width": 896}

    def config(data):
        data["vision_config"].update(image_size=896, patch_size=14)

    return _variant("gemma3", directory, processor=processor, config=config)


def mistral3_small31_snapshot(directory: Path) -> Path:
    """Mistral Small 3.1: Pixtral at patch 14 up to 1540 px, merged 2 x 2 (the model config's own geometry).

    The synthetic processor keeps PixtralProcessor's defaults (patch 16, no
    merge), which the default Mistral3 model cannot run.
    """

    def processor(data):
        data.update(patch_size=14, spatial_merge_size=2)
        data["image_processor"]["patch_size"] = {"height": 14, "width": 14}
        data["image_processor"]["size"] = {"longest_edge": 1540}

    return _variant("mistral3", directory, processor=processor)


def idefics3_364_snapshot(directory: Path) -> Path:
    """Idefics3-8B: 364 px tiles / patch 14, pixel-shuffled by 2 to 169 tokens per tile."""

    def config(data):
        data["vision_config"].update(image_size=364, patch_size=14)

    return _variant("idefics3", directory, config=config)


def llava_next_pinpoints_snapshot(directory: Path) -> Path:
    """LLaVA-NeXT with its own any-resolution grid: wide/tall pinpoints up to 4 tiles."""
    pinpoints = [[336, 1344], [1344, 336], [672, 1008], [1008, 672], [336, 336]]

    def processor(data):
        data["image_processor"]["image_grid_pinpoints"] = pinpoints
        data["vision_feature_select_strategy"] = "full"
        data["num_additional_image_tokens"] = 1

    def config(data):
        data["image_grid_pinpoints"] = pinpoints
        data["vision_feature_select_strategy"] = "full"

    return _variant("llava_next", directory, processor=processor, config=config)


def qwen2_vl_pixels_snapshot(directory: Path) -> Path:
    """Qwen2-VL with a checkpoint's own pixel budget (min 128, max 256 merged tokens)."""

    def processor(data):
        data["image_processor"]["size"] = {
            "shortest_edge": 128 * 28 * 28,
            "longest_edge": 256 * 28 * 28,
        }

    return _variant("qwen2_vl", directory, processor=processor)


def gemma3_seq64_snapshot(directory: Path) -> Path:
    """Gemma 3 with 64 soft tokens per image (a smaller pooled grid)."""

    def processor(data):
        data["image_seq_length"] = 64

    def config(data):
        data["mm_tokens_per_image"] = 64

    return _variant("gemma3", directory, processor=processor, config=config)


def idefics3_small_tiles_snapshot(directory: Path) -> Path:
    """Idefics3 cutting images into 182 px tiles of 728 px at most: up to 4 x 4 tiles."""

    def processor(data):
        data["image_processor"]["max_image_size"] = {"longest_edge": 182}
        data["image_processor"]["size"] = {"longest_edge": 728}
        data["image_seq_len"] = 16

    return _variant("idefics3", directory, processor=processor)


def colpali_bos_snapshot(directory: Path) -> Path:
    """ColPali with a Gemma-style tokenizer that adds BOS itself; the processor turns it off."""
    _variant("colpali", directory)

    def tokenizer(data):
        bos = json.loads((directory / "tokenizer_config.json").read_text())["bos_token"]
        bos_id = next(t["id"] for t in data["added_tokens"] if t["content"] == bos)
        data["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        }

    _edit(directory / "tokenizer.json", tokenizer)
    return directory


def qwen2_vl_video_budget_snapshot(directory: Path) -> Path:
    """Qwen2-VL whose video processor keeps its own, smaller pixel budget (32 to 128 merged tokens a frame pair)."""

    def processor(data):
        data["video_processor"]["size"] = {
            "shortest_edge": 32 * 28 * 28,
            "longest_edge": 128 * 28 * 28,
        }

    return _variant("qwen2_vl", directory, processor=processor)


def qwen3_vl_video_budget_snapshot(directory: Path) -> Path:
    """Qwen3-VL with another video pixel budget and a frame cap of 64."""

    def processor(data):
        data["video_processor"]["size"] = {
            "shortest_edge": 64 * 32 * 32,
            "longest_edge": 512 * 32 * 32,
        }
        data["video_processor"]["max_frames"] = 64

    return _variant("qwen3_vl", directory, processor=processor)


def qwen2_audio_128_mel_snapshot(directory: Path) -> Path:
    """Qwen2-Audio with 128 mel bins and 15 s windows (Whisper large-v3 style features)."""

    def processor(data):
        data["feature_extractor"].update(
            feature_size=128, chunk_length=15, n_samples=240_000, nb_max_frames=1500
        )

    def config(data):
        data["audio_config"]["num_mel_bins"] = 128

    return _variant("qwen2_audio", directory, processor=processor, config=config)


def phi4_audio_compression_snapshot(directory: Path) -> Path:
    """Phi-4-multimodal whose audio encoder compresses 4x instead of 8x."""

    def processor(data):
        data["audio_processor"]["audio_compression_rate"] = 4

    return _variant("phi4_multimodal", directory, processor=processor)


def llava_tower_mismatch_snapshot(directory: Path) -> Path:
    """LLaVA whose CLIP tower is built for half the size its processor crops to: the model refuses every image."""

    def config(data):
        data["vision_config"]["image_size"] //= 2

    return _variant("llava", directory, config=config)


def vipllava_default_snapshot(directory: Path) -> Path:
    """VipLLaVA as llava-hf publishes it: the processor drops the CLS token as HF's
    model does (``default``), where the synthetic snapshot counts it."""

    def processor(data):
        data["vision_feature_select_strategy"] = "default"

    return _variant("vipllava", directory, processor=processor)


def deepseek_vl_384_snapshot(directory: Path) -> Path:
    """DeepSeek-VL (1.3B, 7B's low-resolution tower): SigLIP at 384 px / patch 16, the
    576 image tokens the processor writes; the synthetic tower sees 224 px."""

    def processor(data):
        data["image_processor"]["size"] = {"height": 384, "width": 384}

    def config(data):
        data["vision_config"].update(image_size=384, patch_size=16)

    return _variant("deepseek_vl", directory, processor=processor, config=config)


def aya_vision_364_snapshot(directory: Path) -> Path:
    """Aya Vision 8B: SigLIP2 at 364 px / patch 14 with 16 heads, pixel-shuffled by 2
    to 169 tokens per tile; the synthetic tower's 14 heads do not divide its width."""

    def processor(data):
        data["image_processor"]["size"] = {"height": 364, "width": 364}
        data["downsample_factor"] = 2

    def config(data):
        data["vision_config"].update(image_size=364, num_attention_heads=16)

    return _variant("aya_vision", directory, processor=processor, config=config)


# Per family, the snapshot built with its published checkpoints' geometry: the
# audit re-runs a failing vLLM port on it, to tell a real failure from the
# synthetic snapshot's.
CHECKPOINT_GEOMETRY = {
    "llava": llava15_snapshot,
    "paligemma": paligemma448_snapshot,
    "gemma3": gemma3_896_snapshot,
    "mistral3": mistral3_small31_snapshot,
    "idefics3": idefics3_364_snapshot,
    "qwen2_vl": qwen2_vl_pixels_snapshot,
    "colpali": colpali_bos_snapshot,
    "vipllava": vipllava_default_snapshot,
    "deepseek_vl": deepseek_vl_384_snapshot,
    "aya_vision": aya_vision_364_snapshot,
}
