"""The encoder modules mmport names as vLLM's own equivalents exist in the real vLLM.

``mmport.analyzers.vllmencoders.VLLM_ENCODERS`` is a table of the targeted
release's modules; a generated class names them at the line that builds HF's
tower. Each must be a class defined in vLLM 0.33 (the ``vllm`` stage), and
a family whose tower has one gets the name.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from mmport.analyzers import analyze
from mmport.analyzers.vllmencoders import VLLM_ENCODERS
from mmport.sources import resolve


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(VLLM_ENCODERS))
def test_each_named_encoder_is_a_class_of_the_real_vllm(model_type) -> None:
    pytest.importorskip("vllm.model_executor.models.utils")
    encoder = VLLM_ENCODERS[model_type]
    found = getattr(importlib.import_module(encoder.module), encoder.name, None)
    assert isinstance(found, type), encoder.path
    if not encoder.answers:
        return
    # One a port builds takes HF's first input positionally, HF's keywords by name,
    # and has the attributes HF's paths read of the tower.
    params = inspect.signature(found.forward).parameters
    first = list(params.values())[1]
    assert first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, params
    # The sizes HF's batch is cut by are the class's to use, not vLLM's forward's:
    # that one takes the images as a list.
    assert set(encoder.keywords) - {encoder.unpads_by} <= set(params), params
    if encoder.unpads_by:
        assert "list" in str(first.annotation), first
    if encoder.layered:
        assert "select_layers" in params, params
    assert {name for name, _ in encoder.converts} <= set(encoder.keywords)
    built = inspect.getsource(found.__init__)
    # It is built with the keywords the port passes (Idefics3's attention mask).
    takes = inspect.signature(found.__init__).parameters
    assert {name for name, _ in encoder.builds_with} <= set(takes), takes
    for attribute in encoder.attributes:
        assert hasattr(found, attribute) or f"self.{attribute} = " in built, attribute
    # What the class gives it, as properties, vLLM's module neither has nor sets.
    for attribute, _, _ in encoder.provides:
        assert not hasattr(found, attribute) and f"self.{attribute} = " not in built
    # It keeps the tower's weights under the prefix the port's mapper adds.
    if encoder.weights_under:
        assert f"self.{encoder.weights_under.rstrip('.')} = " in built


def test_a_tower_vllm_ships_is_named_and_one_it_does_not_is_not() -> None:
    spec = analyze(resolve("llava"))
    config = resolve("llava").load_config()
    tower = next(m for m in spec.encoder.modules if "vision_config" in m.code)
    projector = next(m for m in spec.encoder.modules if m is not tower)
    # The name follows the tower's own config, whatever the checkpoint's vision model is.
    assert tower.vllm_equivalent == VLLM_ENCODERS[config.vision_config.model_type].path
    assert projector.vllm_equivalent == ""
