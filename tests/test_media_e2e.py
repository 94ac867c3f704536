"""Video and audio sides end to end: zero-edit ports, real-geometry snapshots, and wrong ports verify catches."""

from __future__ import annotations

import json

import pytest
from conftest import failed_checks, mutated_port, scaffold_port, verify_report
from snapshots import (
    phi4_audio_compression_snapshot,
    qwen2_audio_128_mel_snapshot,
    qwen2_vl_video_budget_snapshot,
    qwen3_vl_video_budget_snapshot,
)

slow = pytest.mark.slow


def _spec(ref: str) -> dict:
    from mmport.analyzers import analyze
    from mmport.sources import resolve
    from mmport.spec import to_json

    return json.loads(to_json(analyze(resolve(ref))))


def test_audio_port_passes_and_counts_from_its_outputs(scaffolded) -> None:
    # The fast lane's audio representative: HF computes the count in its own
    # _process_audio from the feature attention mask and drops it; the port
    # carries those lines and HF's hook, and runs them on the item's outputs.
    audio = next(
        m for m in _spec("qwen2_audio")["modalities"] if m["modality"] == "audio"
    )
    assert (
        audio["count"]["strategy"] == "derived"
        and audio["count"]["outputs"]["completion"]
    ), audio["count"]
    code, report = verify_report(
        "qwen2_audio", scaffolded("qwen2_audio") / "qwen2_audio_processing.py"
    )
    assert code == 0, report
    audio_probes = [
        name
        for name, modalities in report["probe_modalities"].items()
        if "audio" in modalities
    ]
    assert audio_probes and report["checks"]["placeholders"]["runs"] > 0


# The named families, one port module covering every modality each handles.
VIDEO_FAMILIES = [
    "qwen2_5_vl",
    "qwen3_vl",
    "glm4v",
    "llava_next_video",
    "llava_onevision",
    "video_llava",
    "internvl",
    "smolvlm",
    "video_llama_3",
    # No hook: __call__ takes videos as `images` and inserts one block of video tokens per prompt.
    "instructblipvideo",
]
AUDIO_FAMILIES = [
    "audioflamingo3",
    "glmasr",
    "phi4_multimodal",
    "qwen3_asr",
    # Its feature extractor needs torchaudio; the count comes from HF's _process_audio (delegated).
    "granite_speech",
    # No hook: __call__ counts each audio itself; the port runs HF's __call__ on the one item (via_call).
    "csm",
]
MIXED_FAMILIES = [
    "gemma3n",
    "qwen2_5_omni",
    "qwen3_omni_moe",
    # An optional audio sub-config, a video setting only the image processor names, and a
    # _process_audio the base call cannot drive (via_call).
    "nemotron_h_omni",
]


@slow
@pytest.mark.parametrize("model_type", VIDEO_FAMILIES + AUDIO_FAMILIES + MIXED_FAMILIES)
def test_named_media_family_passes_with_zero_edits(model_type, scaffolded) -> None:
    port = next(scaffolded(model_type).glob("*_processing.py"))
    code, report = verify_report(model_type, port)
    assert code == 0, report
    covered = {
        m for modalities in report["probe_modalities"].values() for m in modalities
    }
    handled = {m["modality"] for m in _spec(model_type)["modalities"]}
    assert handled <= covered, (handled, covered)  # every side the port has was probed


@slow
def test_images_and_videos_share_a_prompt(scaffolded) -> None:
    # Qwen2.5-VL: probes interleave images and videos in one prompt.
    code, report = verify_report(
        "qwen2_5_vl", scaffolded("qwen2_5_vl") / "qwen2_5_vl_processing.py", probes=8
    )
    assert code == 0, report
    assert any(
        set(ms) == {"image", "video"} for ms in report["probe_modalities"].values()
    ), report["probe_modalities"]


@slow
@pytest.mark.parametrize(
    "build",
    [
        qwen2_vl_video_budget_snapshot,
        qwen3_vl_video_budget_snapshot,
        qwen2_audio_128_mel_snapshot,
        phi4_audio_compression_snapshot,
    ],
)
def test_port_follows_the_snapshots_media_settings(build, tmp_path) -> None:
    # Another video pixel budget or frame cap, 128 mel bins and 15 s windows, another
    # compression: the port reads them from the snapshot at run time, as HF does.
    snapshot = build(tmp_path / "snap")
    port = scaffold_port(str(snapshot), tmp_path / "port")
    code, report = verify_report(str(snapshot), port)
    assert code == 0, report


# (model_type, old text, new text, the check that must fail)
MEDIA_MUTATIONS = [
    # A video count that ignores the temporal grouping (frames instead of frame pairs).
    (
        "qwen2_vl",
        'video_inputs["video_grid_thw"][video_idx].prod()',
        'video_inputs["video_grid_thw"][video_idx][1:].prod() * 2',
        "tokens",
    ),
    # An audio count off by one at a length boundary (even mel lengths).
    (
        "qwen2_audio",
        "(((length - 1) // 2 + 1) - 2) // 2 + 1",
        "((length // 2 + 1) - 2) // 2 + 1",
        "tokens",
    ),
    # Dummy videos of frames smaller than the worst case (how many frames it profiles is
    # the port's choice, noted: docs/vllm.md; the frames' size is not): the port's
    # info overrides the searched worst case.
    (
        "qwen2_vl",
        "    def get_video_tokens(",
        "    def get_video_with_most_features(self, seq_len, mm_counts):\n"
        "        from vllm.multimodal.parse import ImageSize\n\n"
        "        num_frames, _ = super().get_video_with_most_features(seq_len, mm_counts)\n"
        "        return num_frames, ImageSize(width=224, height=224)\n\n"
        "    def get_video_tokens(",
        "dummy",
    ),
    # A block of one frame's query tokens (BLIP-2's image count) in place of four frames'.
    (
        "instructblipvideo",
        "processor.num_query_tokens * 4",
        "processor.num_query_tokens",
        "tokens",
    ),
    # A port that hands HF its videos as `videos`, which its __call__ does not read.
    (
        "instructblipvideo",
        'hf_data["images"] = hf_data.pop("videos")',
        "pass",
        "tokens",
    ),
    # A count through HF's own __call__ on the one audio (via_call) that drops its last position.
    (
        "csm",
        'return _between_added_tokens(outputs["input_ids"][0].tolist(), list(bare))',
        'return outputs["input_ids"][0].tolist()[:-1]',
        "tokens",
    ),
]


@slow
@pytest.mark.parametrize(
    ("model_type", "old", "new", "check"),
    MEDIA_MUTATIONS,
    ids=[f"{m[3]}-{m[0]}-{i}" for i, m in enumerate(MEDIA_MUTATIONS)],
)
def test_wrong_media_port_fails_the_right_check(
    model_type, old, new, check, scaffolded, tmp_path
) -> None:
    wrong = mutated_port(scaffolded(model_type), model_type, old, new, tmp_path)
    code, report = verify_report(model_type, wrong)
    assert code == 1
    assert check in failed_checks(report), report


def test_a_side_hf_refuses_is_noted_not_ported(tmp_path) -> None:
    # With its video processor told not to return metadata, Cosmos 3 Edge's video
    # hook raises for every video: that side is not ported, and the spec says why.
    import shutil

    from mmport.sources import resolve

    snapshot = tmp_path / "snap"
    shutil.copytree(resolve("cosmos3_edge").path, snapshot)
    path = snapshot / "processor_config.json"
    data = json.loads(path.read_text())
    data["video_processor"]["return_metadata"] = False
    path.write_text(json.dumps(data))
    spec = _spec(str(snapshot))
    assert [m["modality"] for m in spec["modalities"]] == ["image"]
    assert any(note.startswith("video not ported") for note in spec["notes"]), spec[
        "notes"
    ]
