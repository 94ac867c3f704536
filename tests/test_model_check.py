"""verify --model: the HF model (tiny twins, CPU) against generated and broken ports."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import invoke, mutated_port, scaffold_port, verify_report
from snapshots import gemma3_896_snapshot, idefics3_364_snapshot

from mmport.verify import ModelOptions

slow = pytest.mark.slow

PROBES = 3


def _verify_model(ref: str, port: Path, tmp_path: Path, **options) -> tuple[int, dict]:
    return verify_report(
        ref, port, probes=PROBES, model=ModelOptions(**{"tiny": True, **options})
    )


@slow
@pytest.mark.parametrize("model_type", ["llava", "paligemma", "qwen2_vl"])
def test_tiny_twin_of_default_config_passes(model_type, scaffolded, tmp_path) -> None:
    port = scaffolded(model_type) / f"{model_type}_processing.py"
    code, report = _verify_model(model_type, port, tmp_path)
    model = report["checks"]["model"]
    assert code == 0 and model["status"] == "pass" and model["runs"] >= 2, report
    assert model["metrics"]["max_logit_diff"] <= 1e-4


@slow
def test_a_prompt_hf_runs_only_item_by_item_is_not_compared_instead_of_failing(
    scaffolded, tmp_path
) -> None:
    # Qwen2-VL's rotary positions find an image by the vision-start token before
    # it, which only a chat template writes; the synthetic snapshot has none, so a
    # probe with images side by side is one HF's own model cannot run, though it
    # runs each image alone. That says nothing of the port: the probe is set aside
    # and said, and the other probes judge the model.
    port = scaffolded("qwen2_vl") / "qwen2_vl_processing.py"
    code, report = verify_report(
        "qwen2_vl", port, probes=4, model=ModelOptions(tiny=True)
    )
    model = report["checks"]["model"]
    assert code == 0 and model["status"] == "pass" and model["runs"] >= 2, report
    assert "not compared on probe3" in model["summary"], model["summary"]


@slow
@pytest.mark.parametrize(
    ("model_type", "encoded"), [("qwen2_vl", "video"), ("qwen2_audio", None)]
)
def test_video_and_audio_items_are_checked_against_the_model(
    model_type, encoded, scaffolded, tmp_path
) -> None:
    # Qwen2-VL exposes its video encoder (get_video_features): each video's feature
    # count and features are compared; Qwen2-Audio exposes none, so its audio is
    # judged through the logits of forwards that hold it, and the summary says so.
    port = scaffolded(model_type) / f"{model_type}_processing.py"
    code, report = _verify_model(model_type, port, tmp_path)
    model = report["checks"]["model"]
    assert code == 0 and model["status"] == "pass", report
    if encoded:
        assert model["metrics"][f"{encoded}_items_encoded"] >= 1, model
    else:
        assert "get_audio_features" in model["summary"], model
    assert any(
        "audio" in m or "video" in m for m in report["probe_modalities"].values()
    )


@slow
def test_video_count_off_by_one_fails_the_model_check(scaffolded, tmp_path) -> None:
    port = mutated_port(
        scaffolded("qwen2_vl"),
        "qwen2_vl",
        "num_video_tokens = video_inputs",
        "num_video_tokens = 1 + video_inputs",
        tmp_path,
    )
    code, report = _verify_model("qwen2_vl", port, tmp_path)
    messages = [f["message"] for f in report["checks"]["model"]["failures"]]
    assert code == 1 and any(
        m.startswith("video ") and "feature vectors" in m for m in messages
    ), report


@slow
@pytest.mark.parametrize("build", [gemma3_896_snapshot, idefics3_364_snapshot])
def test_tiny_twin_of_real_geometry_passes(build, tmp_path) -> None:
    snapshot = build(tmp_path / "snap")
    code, report = _verify_model(
        str(snapshot), scaffold_port(str(snapshot), tmp_path / "port"), tmp_path
    )
    assert code == 0 and report["checks"]["model"]["status"] == "pass", report


@slow
def test_count_off_by_one_fails_with_both_counts(scaffolded, tmp_path) -> None:
    port = mutated_port(
        scaffolded("llava"),
        "llava",
        "        return num_image_tokens\n",
        "        return num_image_tokens + 1\n",
        tmp_path,
    )
    code, report = _verify_model("llava", port, tmp_path)
    failures = report["checks"]["model"]["failures"]
    counts = [
        f for f in failures if "feature vectors from the HF encoder" in f["message"]
    ]
    assert code == 1 and counts, report
    # The encoder's count is HF's; the port's is one more, as mutated.
    assert all(int(f["actual"]) == int(f["expected"]) + 1 for f in counts)


@slow
def test_wrong_item_slicing_names_the_item_and_tensor(scaffolded, tmp_path) -> None:
    port = mutated_port(
        scaffolded("llava"),
        "llava",
        'MultiModalFieldConfig.batched("image")',
        'MultiModalFieldConfig.shared("image", 2)',
        tmp_path,
    )
    code, report = _verify_model("llava", port, tmp_path)
    messages = [f["message"] for f in report["checks"]["model"]["failures"]]
    assert code == 1 and any(
        "item 0" in m and "`pixel_values`" in m for m in messages
    ), report


def test_cuda_asked_for_without_cuda_is_a_clear_error(scaffolded, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    port = scaffolded("llava") / "llava_processing.py"
    result = invoke(
        "verify", "llava", "--port", str(port), "--model", "--device", "cuda"
    )
    assert (
        result.returncode == 2
        and "no CUDA device" in result.stderr
        and "Traceback" not in result.stderr
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--tiny",), "add --model"),
        (("--weights",), "add one"),
        (("--serve", "--weights"), "holds no weights"),
        (("--model", "--weights"), "holds no weights"),
        (("--model", "--tiny", "--weights"), "exclude each other"),
        (("--model", "--dtype", "float8"), "unknown dtype"),
    ],
)
def test_bad_model_options_exit_2(args, needle, scaffolded) -> None:
    port = scaffolded("llava") / "llava_processing.py"
    result = invoke("verify", "llava", "--port", str(port), *args)
    assert (
        result.returncode == 2
        and needle in result.stderr
        and "Traceback" not in result.stderr
    ), result.stderr


@slow
def test_snapshot_weights_are_loaded_with_weights(scaffolded, tmp_path) -> None:
    import shutil

    import transformers

    from mmport.hf.tiny import tiny_twin
    from mmport.sources import resolve

    # A local snapshot holding weights: the synthetic LLaVA with a tiny twin's
    # config and seeded weights saved as a checkpoint would be.
    snapshot = tmp_path / "snap"
    shutil.copytree(resolve("llava").path, snapshot)
    config = tiny_twin(resolve("llava").load_config())
    model = getattr(transformers, config.architectures[0])._from_config(config)
    model.save_pretrained(snapshot)
    port = scaffolded("llava") / "llava_processing.py"
    code, report = verify_report(
        str(snapshot), port, probes=2, model=ModelOptions(weights=True)
    )
    assert code == 0, report
    assert report["checks"]["model"]["metrics"]["parameters"] == sum(
        p.numel() for p in model.parameters()
    )
