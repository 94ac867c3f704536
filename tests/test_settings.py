"""Per-request processor settings: generated ports count under them as HF does, and verify judges them.

Which settings change a count, and what HF counts under them, always comes
from the HF processor itself (``count_changing_settings``, ``item_count``);
nothing here states an expected count.
"""

from __future__ import annotations

import pytest
from conftest import failed_checks, invoke, mutated_port, verify_report

from mmport.analyzers import analyze
from mmport.sources import resolve
from mmport.verify.reference import HFReference
from mmport.verify.settings import (
    SETTINGS_PER_MODALITY,
    Setting,
    count_changing_settings,
    telling_items,
    typed_call_kwargs,
)

slow = pytest.mark.slow

# Families whose counts change under request settings (pixel budgets, tiling switches, tile sizes).
SETTING_FAMILIES = ["qwen2_vl", "idefics3", "glm4v", "qwen2_5_vl"]


def _budget_setting(ref: str) -> dict:
    """A pixel budget a quarter of the snapshot's own: a setting vLLM users pass, taken from HF's defaults."""
    processor = resolve(ref).load_processor()
    return {"max_pixels": processor.image_processor.size["longest_edge"] // 4}


def test_pinned_setting_changes_hf_and_the_port_follows(scaffolded) -> None:
    setting = _budget_setting("qwen2_vl")
    hf = HFReference(resolve("qwen2_vl"))
    item = hf.reference_items("image")[-1]
    # The setting must matter, or this test could not fail.
    assert hf.item_count(item, Setting(setting)) != hf.item_count(item)
    port = scaffolded("qwen2_vl") / "qwen2_vl_processing.py"
    code, report = verify_report("qwen2_vl", port, probes=3, processor_kwargs=setting)
    assert code == 0, report
    under = [name for name in report["probe_cases"] if "max_pixels" in name]
    assert under, report["probe_cases"]
    assert report["settings"] == [
        {
            "modality": "",
            "kwargs": f"max_pixels={setting['max_pixels']}",
            "origin": "pinned",
        }
    ]


def test_port_ignoring_request_settings_fails_tokens(scaffolded, tmp_path) -> None:
    # The port edited to count every image under the defaults, whatever the request says.
    wrong = mutated_port(
        scaffolded("qwen2_vl"),
        "qwen2_vl",
        "get_image_item_tokens( item_idx, mm_items, hf_processor_mm_kwargs )",
        "get_image_item_tokens(item_idx, mm_items)",
        tmp_path,
    )
    code, report = verify_report(
        "qwen2_vl", wrong, probes=3, processor_kwargs=_budget_setting("qwen2_vl")
    )
    assert code == 1
    assert "tokens" in failed_checks(report)
    failing = {f["probe"] for f in report["checks"]["tokens"]["failures"]}
    assert failing and all("max_pixels" in probe for probe in failing), failing


def test_verify_names_the_settings_it_drew_on_the_command_line(
    scaffolded, tmp_path
) -> None:
    port = scaffolded("qwen2_vl") / "qwen2_vl_processing.py"
    result = invoke("verify", "qwen2_vl", "--port", str(port), "--probes", "2")
    assert result.returncode == 0, result.stdout
    assert "probes also ran under request settings" in " ".join(result.stdout.split())


@pytest.mark.parametrize("model_type", ["qwen2_vl", "llava"])
def test_inspect_lists_the_settings_hf_counts_change_under(model_type) -> None:
    spec = analyze(resolve(model_type))
    image = spec.image
    listed = {s.name for s in image.settings}
    processor = resolve(model_type).load_processor()
    typed = set(typed_call_kwargs(processor, "image"))
    for s in image.settings:
        assert s.name in typed, s
        assert s.read_at.code and (s.name in s.read_at.code or s.folded_into), s
    # Every setting HF's own counts change under (but settings no count code reads) is listed.
    drawn = count_changing_settings(HFReference(resolve(model_type)), per_modality=99)
    for setting in drawn:
        if setting.modality == "image":
            assert set(setting.kwargs) <= listed, (setting, listed)


@slow
@pytest.mark.parametrize("model_type", SETTING_FAMILIES)
def test_generated_port_matches_hf_under_drawn_settings(model_type, scaffolded) -> None:
    port = scaffolded(model_type) / f"{model_type}_processing.py"
    code, report = verify_report(
        model_type, port, probes=4, settings_per_modality=SETTINGS_PER_MODALITY
    )
    assert report["settings"], (
        "no setting changes HF's counts here, so nothing was judged under one"
    )
    assert code == 0, report


@pytest.mark.vllm
@slow
@pytest.mark.parametrize("model_type", SETTING_FAMILIES)
def test_generated_port_matches_hf_under_settings_in_real_vllm(
    model_type, scaffolded
) -> None:
    pytest.importorskip("vllm.multimodal.processing")
    port = scaffolded(model_type) / f"{model_type}_processing.py"
    code, report = verify_report(
        model_type,
        port,
        probes=4,
        seed=1,
        backend="vllm",
        settings_per_modality=SETTINGS_PER_MODALITY,
    )
    assert report["backend"].startswith("vllm 0.33"), report["backend"]
    assert report["settings"], (
        "no setting changes HF's counts here, so nothing was judged under one"
    )
    assert report["checks"]["embeds"]["status"] in ("pass", "skip"), report["checks"][
        "embeds"
    ]
    assert code == 0, report


# Settings that reshape the vision tower's token grid, which the config does not name:
# a hook reading a sub-processor attribute the request also sets (merge_size), and a
# factor HF resizes by that HF's token API leaves out (patch_expand_factor).
GRID_SETTINGS = [
    ("video_llama_3", "merge_size"),
    ("kimi_k25", "merge_size"),
    ("glm5_next", "patch_expand_factor"),
]


def _grid_setting(ref: str, name: str) -> dict:
    """Another value than the snapshot's own for the image processor's ``name`` (halved, or doubled from 1)."""
    value = getattr(resolve(ref).load_processor().image_processor, name)
    return {name: value // 2 if value > 1 else value * 2}


def _judged_under_grid_setting(ref: str, name: str, scaffolded, **options) -> dict:
    """verify's report for the generated port pinned to the grid setting, which must change HF's count."""
    setting = _grid_setting(ref, name)
    hf = HFReference(resolve(ref))
    told = telling_items(hf, Setting(setting))
    assert told, "the setting must matter, or this test could not fail"
    item = told[0]
    from mmport.errors import MmportError

    try:
        code, report = verify_report(
            ref,
            scaffolded(ref) / f"{ref}_processing.py",
            probes=3,
            processor_kwargs=setting,
            **options,
        )
    except MmportError as exc:
        # HF's own model cannot take it (a tower built to merge by another size): no engine
        # serves such a request, so nothing the user pinned can be judged. Measured again here.
        assert "not applicable to this checkpoint" in str(exc), exc
        _hf_model_refuses(hf, Setting(setting), item)
        return {}
    assert [name in probe for probe in report["probe_cases"]].count(True) >= 3, report[
        "probe_cases"
    ]
    assert "refuses" not in report["checks"]["tokens"]["summary"], report["checks"][
        "tokens"
    ]  # followed, not refused
    assert code == 0, report
    return report


def _hf_model_refuses(hf: HFReference, setting: Setting, item) -> None:
    """A tiny twin of HF's model runs an ordinary image under the defaults and raises on ``item`` under ``setting``."""
    from mmport.runtime.device import placement
    from mmport.runtime.hf_model import load_model

    twin = load_model(
        hf.snapshot, placement("cpu", "float32"), tiny=True, weights=False, seed=0
    )
    twin.logits(hf.single(hf.reference_items("image")[0]).inputs)
    with pytest.raises(
        Exception
    ):  # whatever HF raises: it refuses its own processor's outputs
        twin.logits(hf.single(item, setting).inputs)


@slow
@pytest.mark.parametrize(("model_type", "name"), GRID_SETTINGS)
def test_generated_port_follows_a_setting_that_reshapes_the_token_grid(
    model_type, name, scaffolded
) -> None:
    _judged_under_grid_setting(model_type, name, scaffolded)


@pytest.mark.vllm
@slow
@pytest.mark.parametrize(("model_type", "name"), GRID_SETTINGS)
def test_generated_port_follows_a_setting_that_reshapes_the_token_grid_in_real_vllm(
    model_type, name, scaffolded
) -> None:
    pytest.importorskip("vllm.multimodal.processing")
    report = _judged_under_grid_setting(model_type, name, scaffolded, backend="vllm")
    assert not report or report["backend"].startswith("vllm 0.33"), report["backend"]


@pytest.mark.vllm
@slow
def test_port_ignoring_request_settings_fails_in_real_vllm(
    scaffolded, tmp_path
) -> None:
    pytest.importorskip("vllm.multimodal.processing")
    wrong = mutated_port(
        scaffolded("qwen2_vl"),
        "qwen2_vl",
        "get_image_item_tokens( item_idx, mm_items, hf_processor_mm_kwargs )",
        "get_image_item_tokens(item_idx, mm_items)",
        tmp_path,
    )
    code, report = verify_report(
        "qwen2_vl",
        wrong,
        probes=3,
        backend="vllm",
        processor_kwargs=_budget_setting("qwen2_vl"),
    )
    assert code == 1 and "tokens" in failed_checks(report), report


@pytest.mark.vllm
@slow
# Idefics3 lays out each image's tiles by its size, InternVL each video's frames:
# only the dict form (the rows and the item's size) places those.
@pytest.mark.parametrize(
    "model_type", ["llava", "qwen2_vl", "gemma3", "qwen2_audio", "idefics3", "internvl"]
)
def test_generated_port_takes_embeddings_in_real_vllm(model_type, scaffolded) -> None:
    pytest.importorskip("vllm.multimodal.processing")
    port = scaffolded(model_type) / f"{model_type}_processing.py"
    code, report = verify_report(model_type, port, probes=2, backend="vllm")
    embeds = report["checks"]["embeds"]
    assert embeds["status"] == "pass" and not embeds["summary"], embeds
    assert code == 0, report


def test_embeddings_given_to_a_port_get_hf_tokens(scaffolded) -> None:
    port = scaffolded("qwen2_vl") / "qwen2_vl_processing.py"
    code, report = verify_report("qwen2_vl", port, probes=2)
    embeds = report["checks"]["embeds"]
    # Both of Qwen2-VL's modalities take embeddings: one comparison each, at least.
    assert (
        embeds["status"] == "pass" and embeds["runs"] >= 2 and not embeds["summary"]
    ), embeds
