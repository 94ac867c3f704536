"""Request settings the HF model cannot take are not the port's fault (mmport.verify.fit).

Whether the model takes a setting is measured on HF's own model (a tiny twin,
built here independently of the judge) or read from its towers' signatures;
nothing here names a setting or a family's answer.
"""

from __future__ import annotations

import inspect

import pytest
from snapshots import llava_tower_mismatch_snapshot

from mmport.runtime.device import placement
from mmport.runtime.hf_model import load_model
from mmport.sources import resolve
from mmport.verify.fit import FitJudge, fixed_inputs
from mmport.verify.reference import HFReference
from mmport.verify.settings import count_changing_settings, telling_items


def _twin(hf: HFReference):
    return load_model(
        hf.snapshot, placement("cpu", "float32"), tiny=True, weights=False, seed=0
    )


def test_a_tower_fixes_its_input_where_its_forward_does_not_interpolate() -> None:
    import transformers

    config = resolve("llava").load_config()
    towers = fixed_inputs(config)
    assert towers, "LLaVA's vision tower must be found"
    for tower in towers:
        sub = getattr(config, tower.config)
        assert tower.size == (sub.image_size, sub.image_size)
        assert tower.source.startswith("transformers/models/") and ":" in tower.source
        forward = getattr(transformers, tower.tower).forward
        assert inspect.signature(forward).parameters[
            "interpolate_pos_encoding"
        ].default in (False, None)
    # A tower without the switch (Qwen2-VL's takes any size) fixes nothing.
    assert not fixed_inputs(resolve("qwen2_vl").load_config())


def test_the_static_rule_agrees_with_the_hf_model() -> None:
    # Every count-changing setting the tower's fixed input rules out, HF's own model
    # (a tiny twin keeps the tower's geometry) refuses too, and takes the same item by default.
    hf = HFReference(resolve("llava"))
    judge = FitJudge(hf)
    ruled_out = [
        s
        for s in count_changing_settings(hf, per_modality=99)
        if judge.fit(s).verdict == "not applicable"
    ]
    assert ruled_out, "no setting to decide here, so this test could not fail"
    twin = _twin(hf)
    for setting in ruled_out:
        fit = judge.fit(setting)
        assert fit.basis == "tower input size" and setting.describe() in fit.reason, fit
        item = telling_items(hf, setting)[0]
        twin.logits(hf.single(item).inputs)
        with pytest.raises(Exception):  # whatever HF raises: it refuses the input
            twin.logits(hf.single(item, setting).inputs)
    assert judge.model_seconds == 0  # decided statically: no model built


def test_settings_the_model_takes_are_kept_and_run_on_a_tiny_twin() -> None:
    hf = HFReference(resolve("qwen2_vl"))
    judge = FitJudge(hf)
    drawn = count_changing_settings(hf, per_modality=1, keep=judge.applicable)
    assert drawn
    for setting in drawn:
        fit = judge.fit(setting)
        assert fit.verdict == "applicable" and "tiny twin" in fit.basis, fit
    assert not judge.not_applicable() and not judge.undecided()


def test_a_model_refusing_the_defaults_leaves_settings_undecided_and_judged(
    tmp_path,
) -> None:
    hf = HFReference(resolve(str(llava_tower_mismatch_snapshot(tmp_path / "snap"))))
    with pytest.raises(
        Exception
    ):  # HF's model refuses an ordinary image: measured, not assumed
        _twin(hf).logits(hf.single(hf.reference_items("image")[0]).inputs)
    judge = FitJudge(hf)
    drawn = count_changing_settings(hf, per_modality=1, keep=judge.applicable)
    assert drawn, "an undecided setting is still judged"
    assert [f.setting for f in judge.undecided()] == [s.describe() for s in drawn]
    assert all("under the defaults too" in f.reason for f in judge.undecided())
