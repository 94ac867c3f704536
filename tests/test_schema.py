"""Classes written as vLLM code validate vLLM's own inputs, as vLLM's test_tensor_schema.py does.

Each class's ``_parse_and_validate_<modality>_input`` is fed what vLLM's
processor (the port's) makes of the dummy inputs builder's worst case, and of
that case at half and a quarter of its size, two items batched per modality
as vLLM's runner batches them (mmport.serve._construct). A class whose input
classes declare another shape than the processor's fields give fails there,
before any request would.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import snapshots
from conftest import construct_job

from mmport.serve import serve_python
from mmport.serve._construct import SCHEMA_FACTORS
from mmport.serve.construct import ConstructJob, construct_ports

pytestmark = [
    pytest.mark.serve,
    pytest.mark.skipif(
        serve_python() is None, reason="no serve environment (MMPORT_SERVE_PYTHON)"
    ),
    pytest.mark.xdist_group("construct"),
]

# Families whose class is written as vLLM code (mmport.analyzers.vllmclass), each on
# the snapshot its serve test uses where the synthetic one's geometry disagrees with
# HF's own model; among them towers called with layers chosen, projectors copied from
# HF's code, HF's feature method copied, items with crops of their own, and a video.
SCHEMA_FAMILIES = {
    "llava": None,
    "paligemma": None,
    "llava_next": None,
    "llava_next_video": None,
    "llava_onevision": None,
    "cohere2_vision": None,
    "qwen2_vl": None,
    "qwen2_5_vl": None,
    "idefics3": snapshots.idefics3_364_snapshot,
    "mistral3": snapshots.mistral3_small31_snapshot,
    "lighton_ocr": None,
    "gemma3": snapshots.gemma3_896_snapshot,
    "aya_vision": snapshots.aya_vision_364_snapshot,
    "deepseek_vl": snapshots.deepseek_vl_384_snapshot,
    "vipllava": snapshots.vipllava_default_snapshot,
    # HF's audio tower kept (vLLM ships none), HF's lines of forward copied.
    "qwen2_audio": None,
}
# LLaVA's class with its pixel input class declaring one dimension too few.
WRONG_SHAPE = "llava_wrong_shape"


def _job(name: str, root: Path, build=None, edit=None) -> tuple[ConstructJob, object]:
    ref = str(build(root / f"{name}.snapshot")) if build else ""
    model_type = name.removesuffix("_wrong_shape")
    return construct_job(name, root, ref or model_type, edit, language=False)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Every family's spec and outcome, all built in one serve-environment process."""
    root = tmp_path_factory.mktemp("schema")
    jobs = {name: _job(name, root, build) for name, build in SCHEMA_FAMILIES.items()}

    def wrong(text: str) -> str:
        declared = 'TensorShape("bn", "c", "h", "w"'
        assert declared in text
        return text.replace(declared, 'TensorShape("bn", "h", "w"', 1)

    jobs[WRONG_SHAPE] = _job(WRONG_SHAPE, root, edit=wrong)
    built = construct_ports([job for job, _ in jobs.values()])
    return {name: (spec, built[name]) for name, (_, spec) in jobs.items()}


@pytest.mark.parametrize("family", sorted(SCHEMA_FAMILIES))
def test_vllm_code_validates_dummy_inputs_at_three_sizes(checked, family) -> None:
    spec, outcome = checked[family]
    assert spec.vllm_model is not None, spec.vllm_model_reason
    assert outcome.ok, outcome.error or outcome.environment
    validated = dict(outcome.schema)
    assert set(validated) == {m.modality for m in spec.modalities}
    for modality, factors in validated.items():
        assert factors == SCHEMA_FACTORS, (modality, factors)


def test_an_input_class_declaring_another_shape_fails_at_the_worst_case(
    checked,
) -> None:
    _, outcome = checked[WRONG_SHAPE]
    assert outcome.ok  # the class builds: only its inputs' validation fails
    why = dict(outcome.schema)["image"]
    assert isinstance(why, str) and why.startswith("at 1.0 of the worst case"), why
    assert "pixel_values" in why
