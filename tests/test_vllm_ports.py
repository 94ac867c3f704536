"""Generated ports inside real vLLM 0.33: they import unmodified and match HF there.

Runs only where ``vllm.multimodal.processing`` imports (``-m vllm``); see
docs/vllm.md for the environment CI builds for it.
"""

from __future__ import annotations

import pytest
from snapshots import (
    gemma3_seq64_snapshot,
    idefics3_small_tiles_snapshot,
    llava15_snapshot,
    llava_next_pinpoints_snapshot,
    paligemma448_snapshot,
)

from mmport.verify import verify_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _real_vllm() -> None:
    pytest.importorskip("vllm.multimodal.processing")


def _assert_passes(ref: str, port) -> None:
    report = verify_port(ref, port, probes=6, seed=1, backend="vllm")
    assert report.backend.startswith("vllm 0.33"), report.backend
    assert report.passed, report.failure_summary()


# llava_next derives a count that depends on the image size; gemma3 and
# idefics3 carry HF's replacement hook over; pixtral takes the resized size from
# HF's token API; chameleon appends a token to every prompt, blip-2 inserts a
# block at the start, aya_vision replaces a placeholder that is not the
# embedded token. The rest of the named families follow (fuyu fails
# verify everywhere, see docs/families.md).
NAMED_FAMILIES = [
    "llava",
    "paligemma",
    "gemma3",
    "llava_next",
    "idefics3",
    "pixtral",
    "chameleon",
    "blip-2",
    "aya_vision",
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "smolvlm",
    "mistral3",
    "internvl",
    "instructblip",
    "lfm2_vl",
    "cohere2_vision",
    "llava_onevision",
]


@pytest.mark.parametrize("model_type", NAMED_FAMILIES)
def test_generated_port_matches_hf_in_real_vllm(model_type, scaffolded) -> None:
    _assert_passes(model_type, next(scaffolded(model_type).glob("*_processing.py")))


# One family per later mechanism: gemma4 (the token count from
# _get_num_multimodal_tokens), molmo2 (the entry that method hands the hook),
# deepseek_ocr2 (a part of the patch count), hunyuan_vl (wrapped placeholders),
# emu3 (a BOS HF adds to the text), minicpmv4_6 (an image-id tag per item
# index), colqwen2 (HF writes the image's prompt), got_ocr2 (flat image lists),
# video_llava (geometry set in the constructor). docs/vllm.md lists the
# families that do not pass here yet.
LATER_MECHANISMS = [
    "gemma4",
    "molmo2",
    "deepseek_ocr2",
    "hunyuan_vl",
    "emu3",
    "minicpmv4_6",
    "colqwen2",
    "got_ocr2",
    "video_llava",
]


@pytest.mark.parametrize("model_type", LATER_MECHANISMS)
def test_later_mechanisms_match_hf_in_real_vllm(model_type, scaffolded) -> None:
    _assert_passes(model_type, next(scaffolded(model_type).glob("*_processing.py")))


# Video, audio and both together (Qwen2.5-VL's probes mix images and videos), with
# videos passed as vLLM passes them ((frames, metadata)) and audio as (waveform,
# rate), which vLLM resamples. Under transformers 5.20 (vLLM's pin) Gemma 3n and
# Phi-4-multimodal expand in their own __call__ without hooks, as CSM does in
# both releases, and NemotronH-Omni's _process_audio takes no **kwargs: their
# ports run HF's own __call__ on the one item (via_call). vLLM 0.33 cannot
# configure the Qwen omni models' synthetic configs: docs/families.md.
MEDIA_FAMILIES = [
    "qwen2_5_vl",
    "glm4v",
    "llava_next_video",
    "video_llava",
    "internvl",
    "qwen2_audio",
    "audioflamingo3",
    "instructblipvideo",
    "gemma3n",
    "phi4_multimodal",
    "csm",
    "nemotron_h_omni",
]


@pytest.mark.parametrize("model_type", MEDIA_FAMILIES)
def test_generated_media_port_matches_hf_in_real_vllm(model_type, scaffolded) -> None:
    _assert_passes(model_type, next(scaffolded(model_type).glob("*_processing.py")))


@pytest.mark.parametrize(
    "build",
    [
        llava15_snapshot,
        paligemma448_snapshot,
        llava_next_pinpoints_snapshot,
        gemma3_seq64_snapshot,
        idefics3_small_tiles_snapshot,
    ],
)
def test_generated_port_follows_snapshot_in_real_vllm(
    build, tmp_path, scaffolded
) -> None:
    snapshot = build(tmp_path / "snap")
    out = scaffolded(str(snapshot))
    _assert_passes(str(snapshot), next(out.glob("*_processing.py")))
