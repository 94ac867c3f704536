"""Tiling and crop switches a request flips (vLLM's ``mm_processor_kwargs``): generated ports follow them.

Each switch is flipped from the value HF's own call defaults to, and must
change what HF counts for a reference item, or the test could not fail; what
HF counts under it always comes from HF (``item_count``), never from here.
"""

from __future__ import annotations

import pytest
from conftest import failed_checks, mutated_port, verify_report

from mmport.analyzers import analyze
from mmport.analyzers.replacement import merged_image_kwargs
from mmport.sources import resolve
from mmport.verify.reference import HFReference
from mmport.verify.settings import Setting

slow = pytest.mark.slow

# (family, switch): Gemma 3's pan-and-scan crops, Idefics3's tile split, InternVL's and
# GOT-OCR2's patches (a derived count and a delegated one), Aria's split.
SWITCHES = [
    ("gemma3", "do_pan_and_scan"),
    ("idefics3", "do_image_splitting"),
    ("internvl", "crop_to_patches"),
    ("got_ocr2", "crop_to_patches"),
    ("aria", "split_image"),
]


def _flipped(ref: str, name: str) -> dict:
    """The request that flips ``name`` from the value HF's call defaults to."""
    processor = resolve(ref).load_processor()
    default = merged_image_kwargs(processor).get(
        name, getattr(processor.image_processor, name, None)
    )
    return {name: not default}


def _assert_matters(ref: str, setting: dict) -> None:
    """HF counts some reference image differently under ``setting``: a port ignoring it would show."""
    hf = HFReference(resolve(ref))
    items = hf.reference_items("image")
    assert any(
        hf.item_count(item, Setting(setting)) != hf.item_count(item) for item in items
    ), setting


@pytest.mark.parametrize(("model_type", "name"), SWITCHES)
def test_inspect_names_the_switch_followed(model_type, name) -> None:
    switches = {s.name: s for s in analyze(resolve(model_type)).image.switches}
    assert name in switches and switches[name].followed, switches
    assert all(s.how for s in switches.values())  # followed says how, refused says why


def test_a_refused_switch_is_named_with_its_reason() -> None:
    # Gemma 3 resizes by do_resize, which its count does not read: the port refuses it, and says so.
    image = analyze(resolve("gemma3")).image
    refused = [s for s in image.switches if not s.followed]
    assert {s.name for s in refused} == {s.name for s in image.unfollowed}
    assert all("does not read" in s.how for s in refused), refused


@slow
@pytest.mark.parametrize(("model_type", "name"), SWITCHES)
def test_generated_port_follows_the_switch(model_type, name, scaffolded) -> None:
    setting = _flipped(model_type, name)
    _assert_matters(model_type, setting)
    port = scaffolded(model_type) / f"{model_type}_processing.py"
    code, report = verify_report(model_type, port, probes=3, processor_kwargs=setting)
    assert [name in probe for probe in report["probe_cases"]].count(True) >= 3, report[
        "probe_cases"
    ]
    assert "refuses" not in report["checks"]["tokens"]["summary"], report["checks"][
        "tokens"
    ]  # followed, not refused
    assert code == 0, report


# The port's per-item call, which keeps each image's crops or patches as its own rows,
# forced back to one call for all images: HF's outputs are then split one row an item.
ONE_CALL = ('"images": ("image", True,', '"images": ("image", False,')


@slow
@pytest.mark.parametrize("model_type", ["gemma3", "got_ocr2"])
def test_port_splitting_outputs_one_row_an_image_fails_under_the_switch(
    model_type, scaffolded, tmp_path
) -> None:
    name = dict(SWITCHES)[model_type]
    wrong = mutated_port(scaffolded(model_type), model_type, *ONE_CALL, tmp_path)
    code, report = verify_report(
        model_type, wrong, probes=3, processor_kwargs=_flipped(model_type, name)
    )
    assert code == 1, report
    failing = {
        f["probe"] for check in report["checks"].values() for f in check["failures"]
    }
    assert failing and all(name in probe for probe in failing), failing


@slow
def test_port_ignoring_pan_and_scan_fails_tokens(scaffolded, tmp_path) -> None:
    # The hook's read of HF's crops forced to none, as a port derived with the switch off would count.
    wrong = mutated_port(
        scaffolded("gemma3"),
        "gemma3",
        '["num_crops"][0]',
        '["num_crops"][0] * 0',
        tmp_path,
    )
    code, report = verify_report(
        "gemma3",
        wrong,
        probes=3,
        processor_kwargs=_flipped("gemma3", "do_pan_and_scan"),
    )
    assert code == 1
    assert "tokens" in failed_checks(report)


@pytest.mark.vllm
@slow
def test_gemma3_port_follows_pan_and_scan_in_real_vllm(scaffolded) -> None:
    pytest.importorskip("vllm.multimodal.processing")
    setting = _flipped("gemma3", "do_pan_and_scan")
    port = scaffolded("gemma3") / "gemma3_processing.py"
    code, report = verify_report(
        "gemma3", port, probes=4, seed=1, backend="vllm", processor_kwargs=setting
    )
    assert report["backend"].startswith("vllm 0.33"), report["backend"]
    assert "refuses" not in report["checks"]["tokens"]["summary"], report["checks"][
        "tokens"
    ]  # followed, not refused
    assert code == 0, report
