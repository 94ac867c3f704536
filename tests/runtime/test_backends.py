"""Loading ports, choosing a backend, and the hand-written LLaVA port on the bundled runtime."""

from __future__ import annotations

import sys
import textwrap

import pytest
from PIL import Image

from mmport.errors import MmportError, PortLoadError
from mmport.runtime.backends import BundledBackend, PortPlaceholder, select_backend


def write(tmp_path, source, name="port.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_load_port_finds_the_three_classes(llava_port_file):
    port = BundledBackend().load_port(llava_port_file)

    assert (
        port.info.__name__,
        port.dummy_inputs.__name__,
        port.processor.__name__,
    ) == (
        "LlavaProcessingInfo",
        "LlavaDummyInputsBuilder",
        "LlavaMultiModalProcessor",
    )
    assert sys.modules[port.module_name].__file__ == str(llava_port_file)


def test_each_load_gets_a_fresh_module(llava_port_file):
    backend = BundledBackend()

    assert (
        backend.load_port(llava_port_file).module_name
        != backend.load_port(llava_port_file).module_name
    )


def test_bundled_vllm_is_visible_only_while_the_port_runs(tmp_path):
    path = write(
        tmp_path,
        """
        import vllm
        from vllm.multimodal.processing import BaseDummyInputsBuilder, BaseMultiModalProcessor, BaseProcessingInfo

        VERSION = vllm.__version__

        class Info(BaseProcessingInfo): ...
        class Dummy(BaseDummyInputsBuilder): ...
        class Processor(BaseMultiModalProcessor): ...
        """,
    )
    before = {
        name for name in sys.modules if name == "vllm" or name.startswith("vllm.")
    }

    port = BundledBackend().load_port(path)

    assert sys.modules[port.module_name].VERSION == "0.33.0+mmport.bundled"
    assert {
        name for name in sys.modules if name == "vllm" or name.startswith("vllm.")
    } == before


def test_missing_and_duplicate_classes_are_named(tmp_path):
    path = write(
        tmp_path,
        """
        from vllm.multimodal.processing import BaseMultiModalProcessor, BaseProcessingInfo

        class BaseInfo(BaseProcessingInfo): ...
        class Info(BaseInfo): ...
        class ProcessorA(BaseMultiModalProcessor): ...
        class ProcessorB(BaseMultiModalProcessor): ...
        """,
    )

    with pytest.raises(PortLoadError) as caught:
        BundledBackend().load_port(path)

    message = str(caught.value)
    assert "no subclass of BaseDummyInputsBuilder" in message
    assert "2 subclasses of BaseMultiModalProcessor (ProcessorA, ProcessorB)" in message
    assert (
        "subclasses of BaseProcessingInfo" not in message
    )  # Info refines BaseInfo: one leaf


def test_import_failure_is_one_line(tmp_path):
    path = write(
        tmp_path,
        "from vllm.model_executor.models.llava import LlavaForConditionalGeneration\n",
    )

    with pytest.raises(
        PortLoadError,
        match="ModuleNotFoundError: No module named 'vllm.model_executor'",
    ) as caught:
        BundledBackend().load_port(path)

    assert "\n" not in str(caught.value)


def test_missing_file_is_a_port_load_error(tmp_path):
    with pytest.raises(PortLoadError, match="no such port file"):
        BundledBackend().load_port(tmp_path / "absent.py")


def test_select_backend_forced_and_unknown():
    assert isinstance(select_backend("bundled"), BundledBackend)
    with pytest.raises(MmportError, match="unknown backend 'gpu'"):
        select_backend("gpu")


def test_forcing_vllm_without_it_is_a_one_line_error():
    try:
        import vllm.multimodal.processing  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    with pytest.raises(MmportError, match="vLLM cannot be imported here") as caught:
        select_backend("vllm")
    assert isinstance(select_backend("auto"), BundledBackend)
    assert "\n" not in str(caught.value)


def test_placeholder_counts_embeddings():
    assert PortPlaceholder(offset=3, length=4, is_embed=None).num_embeds == 4
    assert (
        PortPlaceholder(
            offset=3, length=4, is_embed=(False, True, True, False)
        ).num_embeds
        == 2
    )


@pytest.mark.parametrize("size", [(40, 90), (224, 224), (1000, 20)])
def test_handwritten_llava_port_matches_the_hf_processor(
    llava_port_file, llava_snapshot, size
):
    backend = BundledBackend()
    runner = backend.build(backend.load_port(llava_port_file), llava_snapshot)
    image = Image.new("RGB", size, (10, 20, 30))
    prompt = "USER: <image>\nWhat is this? ASSISTANT:"

    out = runner.process(prompt, {"image": [image]})
    reference = runner.hf_processor(text=prompt, images=[image], return_tensors="pt")

    assert out.prompt_token_ids == reference["input_ids"][0].tolist()
    image_id = runner.hf_processor.image_token_id
    assert out.placeholders["image"][0].num_embeds == reference["input_ids"][
        0
    ].tolist().count(image_id)
    assert out.items["image"][0]["pixel_values"].equal(reference["pixel_values"][0])
