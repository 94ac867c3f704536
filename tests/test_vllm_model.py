"""The generated model class inside real vLLM 0.33: its encoder embeds like HF.

The class's constructor needs a full VllmConfig, so the test builds what its
``_mark_tower_model`` block builds (the HF constructor lines mmport
transplanted, evaluated in the generated module's namespace, so a missing
import fails here), loads HF's encoder weights through the class's own
``hf_to_vllm_mapper`` and compares ``embed_multimodal`` with HF's
``get_image_features``, item by item.
"""

from __future__ import annotations

import functools
import importlib
import sys

import pytest
from conftest import scaffold_port

from mmport.analyzers import analyze
from mmport.hf.tiny import tiny_twin
from mmport.media import make_image
from mmport.sources import resolve

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _real_vllm() -> None:
    pytest.importorskip("vllm.model_executor.models.utils")


def _generated_class(model_type: str, tmp_path):
    # A package and module name of the port's own (blip-2's module is blip_2).
    name = analyze(resolve(model_type)).module_name
    package = tmp_path / f"gen_{name}"
    scaffold_port(model_type, package)
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(f"gen_{name}.{name}")
    finally:
        sys.path.remove(str(tmp_path))
    return module


def test_a_class_written_as_vllm_code_is_not_built_here() -> None:
    """This file builds a class's encoder from HF's constructor lines; a class written
    as vLLM code has none to build from, and is proven in the serve stage."""
    for family in (
        "gemma3",
        "glmasr",
        "llava",
        "llava_next",
        "llava_next_video",
        "mistral3",
        "paligemma",
        "qwen2_audio",
        "qwen2_vl",
    ):
        assert analyze(resolve(family)).vllm_model is not None


def _build_encoder(module, cls, config, spec):
    """What the class's ``_mark_tower_model`` block builds, without a VllmConfig.

    A tower the class builds as vLLM's own module (SigLIP's) is built as HF's
    here: vLLM's layers need its platform, which this processing-only
    environment lacks. The serve stage serves those ports (test_serve.py,
    paligemma and gemma3) and builds their classes (test_construct.py, colpali).
    """
    import torch
    from torch import nn

    for name in spec.encoder.config_path:  # the sub-config HF builds the holder from
        config = getattr(config, name)
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    model.config = config
    hf_module = vars(importlib.import_module(spec.encoder.hf_module))
    for part in spec.encoder.modules:
        scope = {"config": config, "self": model}
        if part.native is not None:  # HF's line, in HF's module (see above)
            setattr(model, part.attr, eval(part.code, hf_module, scope))
            continue
        for line in part.setup:
            exec(
                line, vars(module), scope
            )  # the transplanted HF lines, in the module's namespace
        setattr(model, part.attr, eval(part.code, vars(module), scope))
    return model.to(torch.float32).eval()


def _hf_holder(hf, spec):
    """The module of HF's model that defines the feature methods (``model``, ``thinker.model``)."""
    return functools.reduce(
        getattr, filter(None, spec.encoder.outer_attr.split(".")), hf
    )


def _class_and_hf(model_type: str, tmp_path):
    """The generated class's encoder and HF's tiny model, HF's encoder weights loaded
    through the class's own mapper: (snapshot, config, spec, the class, HF's model)."""
    import torch
    import transformers

    module = _generated_class(model_type, tmp_path)
    snapshot = resolve(model_type)
    config = tiny_twin(snapshot.load_config())
    spec = analyze(snapshot)
    model = _build_encoder(
        module, getattr(module, config.architectures[0]), config, spec
    )
    torch.manual_seed(0)
    hf = getattr(transformers, config.architectures[0])._from_config(config).eval()
    mapper = getattr(
        model, "hf_to_vllm_mapper", None
    )  # none where HF's names are its own
    # The parts of HF's class the port builds none of (Qwen2.5-Omni's talker) stay unloaded.
    state = [
        (name, tensor)
        for name, tensor in hf.state_dict().items()
        if not name.startswith(tuple(spec.encoder.unbuilt_prefixes))
    ]
    mapped = dict(mapper.apply(state) if mapper else state)
    for tower in spec.encoder.native_towers:  # built as HF's here (_build_encoder)
        under = f"{tower.attr}.{tower.native.encoder.weights_under}"
        mapped = {
            f"{tower.attr}.{k.removeprefix(under)}" if k.startswith(under) else k: v
            for k, v in mapped.items()
        }
    ours = {k: v for k, v in mapped.items() if not k.startswith("language_model.")}
    loaded = model.load_state_dict(
        ours, strict=True
    )  # every encoder weight maps by name
    assert not loaded.missing_keys and not loaded.unexpected_keys
    return snapshot, config, spec, model, hf


def _placed_embeds(hf, spec) -> dict:
    """Filled, once HF's model runs, with the input embeddings its forward hands its
    language model: the rows it placed at the items' tokens among them."""
    placed: dict = {}

    def keep(_module, _args, kwargs):
        placed["embeds"] = kwargs["inputs_embeds"][0]

    language = getattr(_hf_holder(hf, spec), spec.encoder.language_attr)
    language.register_forward_pre_hook(keep, with_kwargs=True)
    return placed


# glm4v: HF's tower (vLLM's has no layer selection) and HF's rotary positions.
# blip-2: HF's class is its own inner model and holds a whole CausalLM as its text model.
# colpali: HF's retrieval class builds PaliGemma's model through an auto class, from a
# sub-config of its own. Classes written as vLLM code (mmport.analyzers.vllmclass)
# need vLLM's platform for their layers: the serve stage serves them (test_serve.py,
# test_schema.py), and test_a_class_written_as_vllm_code_is_not_built_here keeps them
# out of this file's builder.
@pytest.mark.parametrize("model_type", ["glm4v", "blip-2", "colpali"])
def test_generated_encoder_embeds_like_hf(model_type, tmp_path) -> None:
    import torch

    from mmport.hf.processor import call_processor

    snapshot, _, spec, model, hf = _class_and_hf(model_type, tmp_path)

    processor = snapshot.load_processor()
    images = [make_image(333, 517, 1), make_image(96, 1024, 2)]
    prompt = (
        "" if spec.modalities[0].update.mode == "insert" else processor.image_token * 2
    )
    # As verify calls HF (a processor that writes its own prompt gets the images alone).
    out = call_processor(processor, prompt, images)
    mm = {
        k: v
        for k, v in out.items()
        if k
        not in (
            "input_ids",
            "attention_mask",
            "token_type_ids",
            "mm_token_type_ids",
            "labels",
        )
    }
    with torch.inference_mode():
        embeds = model.embed_multimodal(**mm)
        reference = _hf_holder(hf, spec).get_image_features(**mm).pooler_output
    assert len(embeds) == len(images)
    for ours_item, hf_item in zip(embeds, reference, strict=True):
        hf_item = hf_item.reshape(-1, hf_item.shape[-1])
        assert ours_item.shape == hf_item.shape and torch.equal(ours_item, hf_item)


def test_a_family_without_a_derived_encoder_says_so_instead_of_building_one(
    tmp_path,
) -> None:
    # Phi-4-multimodal: HF's class keeps no inner model with feature methods and
    # places no features in a forward of its own that can be sliced out. The class
    # must import and construct; embedding raises, saying why.
    from torch import nn

    spec = analyze(resolve("phi4_multimodal"))
    assert spec.encoder is None and spec.encoder_reason
    module = _generated_class("phi4_multimodal", tmp_path)
    cls = getattr(module, spec.architecture)
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    with pytest.raises(NotImplementedError, match="could not derive HF's encoder path"):
        model.embed_multimodal(pixel_values=[])


def test_a_modality_hf_hands_its_text_model_more_of_refuses_embeddings_too(
    tmp_path,
) -> None:
    # Qwen3-Omni's thinker gives its text model deepstack features of images and
    # videos beside their rows: neither pixels nor precomputed rows reproduce HF, so
    # both raise, saying why; its audio path, which has no such input, stays.
    import torch
    from torch import nn

    spec = analyze(resolve("qwen3_omni_moe"))
    refused = set(spec.embeddings_refused)
    assert refused and refused < {m.modality for m in spec.modalities}
    assert refused == {m for m, _ in spec.encoder.missing}
    module = _generated_class("qwen3_omni_moe", tmp_path)
    cls = getattr(module, spec.architecture)
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    for side in spec.modalities:
        embeds = {side.embedding_fields[0][0]: [torch.zeros(2, 4)]}
        if side.modality in refused:
            with pytest.raises(NotImplementedError, match="beside the embeddings"):
                model.embed_multimodal(**embeds)
        else:
            assert len(model.embed_multimodal(**embeds)) == 1


def _one_item_alone(processor, spec, modality: str, index: int):
    """HF's processor on one ``modality`` item alone: (its outputs, the item's modality spec)."""
    from mmport.hf.processor import call_processor
    from mmport.media import make_audio, make_video, video_metadata

    side = next(m for m in spec.modalities if m.modality == modality)
    prompt = "" if side.update.mode == "insert" else side.placeholder
    if modality == "video":
        frames, width, height = (4, 8)[index], (64, 96)[index], (48, 64)[index]
        video = (
            make_video(frames, width, height, index),
            video_metadata(frames, width, height, 2.0),
        )
        return call_processor(processor, prompt, [], videos=[video]), side
    rate = processor.feature_extractor.sampling_rate
    audio = make_audio((rate, 3 * rate)[index], index)
    return call_processor(
        processor, prompt, [], audios=[audio], sampling_rate=rate
    ), side


@pytest.mark.parametrize(
    ("model_type", "modality"),
    [
        ("glm4v", "video"),
        ("video_llava", "video"),
        ("fun_asr_nano", "audio"),  # its path needs the frames' mask, an item field
        # HF keeps the feature methods' class inside its thinker, built from
        # config.thinker_config.
        ("qwen2_5_omni", "audio"),
    ],
)
def test_generated_video_and_audio_paths_embed_like_hf(
    model_type, modality, tmp_path
) -> None:
    # Two items of different sizes, handed over as vLLM's runner batches them (flat
    # fields laid end to end, batched ones stacked, whole ones as a list), against
    # HF's feature method on each item alone.
    import torch

    snapshot, _, spec, model, hf = _class_and_hf(model_type, tmp_path)
    assert spec.encoder.path(modality) is not None
    processor = snapshot.load_processor()
    alone = [_one_item_alone(processor, spec, modality, i) for i in range(2)]
    side = alone[0][1]
    batch = {}
    for field in side.fields:
        values = [out[field.key] for out, _ in alone]
        if field.rows:
            batch[field.key] = values
        elif len({v.shape[1:] for v in values}) > 1:  # vLLM cannot stack them: a list
            batch[field.key] = [v[0] for v in values]
        else:
            batch[field.key] = torch.cat(values)
    method = getattr(_hf_holder(hf, spec), f"get_{modality}_features")
    with torch.inference_mode():
        embeds = model.embed_multimodal(**batch)
        reference = []
        for out, _ in alone:
            item = {f.key: out[f.key] for f in side.fields}
            chunks = getattr(method(**item), spec.encoder.path(modality).output)
            reference.append(torch.cat([c.reshape(-1, c.shape[-1]) for c in chunks]))
    assert len(embeds) == 2
    for ours_item, hf_item in zip(embeds, reference, strict=True):
        assert ours_item.shape == hf_item.shape
        torch.testing.assert_close(ours_item, hf_item)


def test_a_video_hf_hands_on_as_images_embeds_what_hf_places(tmp_path) -> None:
    # InternVL's processor hands a video's frames to the model as images, embedded
    # at the image token: the class's video path is its image path under HF's
    # names. The video's embeddings must be the rows HF's forward places. (SmolVLM's
    # does the same, but takes videos only from transformers 5.2x, after this
    # environment's 5.20.)
    import torch

    snapshot, config, spec, model, hf = _class_and_hf("internvl", tmp_path)
    assert spec.encoder.path("video").through == "image"
    out, side = _one_item_alone(snapshot.load_processor(), spec, "video", 1)
    rows = {f.key for f in side.fields if f.rows}
    video = {
        ours: [out[hf_name]] if ours in rows else out[hf_name]
        for hf_name, ours in side.renamed_keys
    }
    placed = _placed_embeds(hf, spec)
    with torch.inference_mode():
        hf(**out)
        embeds = model.embed_multimodal(**video)
    at_tokens = out["input_ids"][0] == getattr(config, side.embed_token_attr)
    assert len(embeds) == 1 and embeds[0].shape[0] == int(at_tokens.sum()) > 0
    assert torch.equal(embeds[0], placed["embeds"][at_tokens])
