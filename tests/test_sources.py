"""References resolve to snapshots whose processor settings agree with their config."""

from __future__ import annotations

import shutil

import pytest

from mmport.errors import BadReferenceError
from mmport.sources import publish_snapshot, resolve
from mmport.sources.defaults import lookup_config, vocabulary_lookups


@pytest.fixture(scope="module")
def llava():
    return resolve("llava")


def test_synthetic_llava_agrees_with_its_config(llava) -> None:
    processor, config = llava.load_processor(), llava.load_config()
    assert llava.origin == "synthetic"
    assert processor.tokenizer.image_token_id == config.image_token_index
    assert processor.image_token_id == config.image_token_index
    # None-default processor settings come from the config, by name.
    assert processor.patch_size == config.vision_config.patch_size
    assert (
        processor.vision_feature_select_strategy
        == config.vision_feature_select_strategy
    )
    # The image processor feeds the tower the config describes.
    assert (
        processor.image_processor.crop_size["height"] == config.vision_config.image_size
    )


def test_synthetic_paligemma_takes_image_seq_length_from_config() -> None:
    snapshot = resolve("paligemma")
    processor = snapshot.load_processor()
    assert processor.image_seq_length == lookup_config(
        snapshot.config_dict, "image_seq_length"
    )
    assert processor.image_token_id == snapshot.load_config().image_token_index


def test_synthetic_vocabulary_holds_newlines(llava) -> None:
    # One token each, spelt in the vocabulary's own alphabet (byte-level: "Ċ"), as on a checkpoint.
    tokenizer = llava.load_processor().tokenizer
    for text in ("\n", "\n\n"):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert len(ids) == 1 and tokenizer.decode(ids) == text


def test_synthetic_tokenizer_splits_as_its_ancestor_familys() -> None:
    # transformers maps no tokenizer to gemma4; its modular file derives its text model
    # from Gemma 3's, so its synthetic tokenizer keeps "\n\n" whole, as Gemma 3's does.
    gemma4, gemma3 = (
        resolve(model_type).load_processor().tokenizer
        for model_type in ("gemma4", "gemma3")
    )
    text = "\n\n00:00"

    def first_token(tokenizer) -> str:
        return tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)[:1])

    assert first_token(gemma4) == first_token(gemma3)
    assert type(gemma4).__name__ == type(gemma3).__name__
    # The family's BOS rule comes along.
    starts = [
        tokenizer.encode(text)[0] == tokenizer.bos_token_id
        for tokenizer in (gemma4, gemma3)
    ]
    assert starts[0] == starts[1]


def test_synthetic_snapshot_is_built_once(llava) -> None:
    stamp = (llava.path / "config.json").stat().st_mtime_ns
    assert (resolve("llava").path / "config.json").stat().st_mtime_ns == stamp


def test_a_snapshot_another_process_put_in_place_first_stays(llava, tmp_path) -> None:
    # Two processes building one synthetic snapshot at once (pytest -n 2): the one
    # that finishes second must not pull the first's out from under its readers.
    target = shutil.copytree(llava.path, tmp_path / "llava")
    first = {p.name: p.stat().st_ino for p in target.iterdir()}
    late = shutil.copytree(llava.path, tmp_path / ".llava-late")
    publish_snapshot(late, target)
    assert {p.name: p.stat().st_ino for p in target.iterdir()} == first
    # A directory holding no snapshot (left empty, or half-written) is replaced.
    shutil.rmtree(target)
    target.mkdir()
    (target / "stray").write_text("")
    publish_snapshot(late, target)
    assert (target / "config.json").is_file() and not (target / "stray").exists()
    assert not late.exists()


def test_local_directory(llava, tmp_path) -> None:
    copy = shutil.copytree(llava.path, tmp_path / "snap")
    snapshot = resolve(str(copy))
    assert (snapshot.origin, snapshot.model_type, snapshot.path) == (
        "local",
        "llava",
        copy.resolve(),
    )


def test_cached_hub_snapshot_resolves_offline(llava, tmp_path, monkeypatch) -> None:
    # Lay the snapshot out as huggingface_hub's cache does, then go offline.
    repo = tmp_path / "hub" / "models--someorg--tiny-llava"
    files = repo / "snapshots" / "0123456789abcdef"
    shutil.copytree(llava.path, files)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    snapshot = resolve("someorg/tiny-llava")
    assert (snapshot.origin, snapshot.model_type, snapshot.path) == (
        "hub",
        "llava",
        files.resolve(),
    )


def test_unknown_model_type_names_the_problem() -> None:
    with pytest.raises(BadReferenceError, match="unknown model_type 'no_such_model'"):
        resolve("no_such_model")


def test_synthetic_vocabulary_holds_the_constructors_token_texts() -> None:
    # CohereCompass sets `self.image_token = "<|IMAGE_PAD|>"` and takes the id
    # from the tokenizer: the text must be one token, at that id.
    processor = resolve("cohere_compass").load_processor()
    tokenizer = processor.tokenizer
    assert tokenizer.tokenize(processor.image_token) == [processor.image_token]
    assert (
        tokenizer.convert_tokens_to_ids(processor.image_token)
        == processor.image_token_id
    )


@pytest.mark.parametrize("model_type", ["glm4v", "minimax_m3_vl"])
def test_synthetic_vocabulary_holds_what_the_processor_looks_up_by_text(
    model_type,
) -> None:
    # GLM-4V's constructor calls convert_tokens_to_ids("<|begin_of_video|>"), MiniMax-M3-VL's
    # convert_tokens_to_ids(self.VISION_START_TOKEN): on a checkpoint each is one token.
    processor = resolve(model_type).load_processor()
    tokenizer = processor.tokenizer
    looked_up = vocabulary_lookups(type(processor))
    assert looked_up
    for text in looked_up:
        assert tokenizer.tokenize(text) == [text]
        assert tokenizer.convert_tokens_to_ids(text) != tokenizer.unk_token_id


def test_synthetic_tokenizer_holds_tokens_the_call_appends() -> None:
    # Chameleon's __call__ appends `self.tokenizer.sep_token` to every prompt.
    processor = resolve("chameleon").load_processor()
    ids = processor(text=["hi"], return_tensors="pt")["input_ids"][0].tolist()
    assert processor.tokenizer.sep_token is not None
    assert ids[-1] == processor.tokenizer.sep_token_id


def test_token_the_processor_adds_itself_stays_unnamed() -> None:
    # BLIP-2 adds "<image>" itself unless the tokenizer names one; only that path runs.
    from mmport.media import make_image

    processor = resolve("blip-2").load_processor()
    assert not hasattr(processor.tokenizer, "image_token")
    out = processor(text=["hi"], images=[make_image(8, 8, 0)], return_tensors="pt")
    image_id = processor.tokenizer.convert_tokens_to_ids(str(processor.image_token))
    assert out["input_ids"][0].tolist().count(image_id) == processor.num_query_tokens


def test_missing_image_token_count_follows_the_vision_tower() -> None:
    snapshot = resolve("llava_onevision")
    vision = snapshot.config_dict["vision_config"]
    assert (
        snapshot.load_processor().num_image_tokens
        == (vision["image_size"] // vision["patch_size"]) ** 2
    )


def test_config_lookup_descends_level_by_level() -> None:
    # ColPali nests a whole PaliGemma config (vlm_config) with its own sub-configs.
    config = {
        "model_type": "outer",
        "vlm_config": {
            "model_type": "inner",
            "text_config": {"model_type": "text", "num_image_tokens": 64},
        },
        "vision_config": {"model_type": "vision", "image_size": 224},
    }
    assert lookup_config(config, "image_seq_length") == 64
    config["vlm_config"]["text_config"]["image_size"] = 448  # a shallower layer wins
    assert lookup_config(config, "image_size") == 224


def test_wrapper_takes_settings_from_its_nested_model() -> None:
    # ColPali's processor reads image_processor.image_seq_length, which only the
    # nested PaliGemma config's text_config carries.
    snapshot = resolve("colpali")
    assert snapshot.load_processor().image_seq_length == lookup_config(
        snapshot.config_dict, "image_seq_length"
    )


def test_wrapper_takes_its_image_processor_from_the_nested_models_processor() -> None:
    # ColModernVBert maps no image processor; its vlm_config's model_type maps to a
    # processor whose family does.
    from transformers.models.auto.image_processing_auto import (
        IMAGE_PROCESSOR_MAPPING_NAMES,
    )
    from transformers.models.auto.processing_auto import (
        PROCESSOR_MAPPING_NAMES,
        processor_class_from_name,
    )

    snapshot = resolve("colmodernvbert")
    nested = processor_class_from_name(
        PROCESSOR_MAPPING_NAMES[snapshot.config_dict["vlm_config"]["model_type"]]
    )
    family = nested.__module__.split(".")[2]
    assert (
        type(snapshot.load_processor().image_processor).__name__
        in IMAGE_PROCESSOR_MAPPING_NAMES[family].values()
    )


def test_variant_takes_its_image_processor_from_the_processors_family() -> None:
    # glm4v_moe maps no image processor of its own; it borrows Glm4vProcessor,
    # whose family (the module it lives in) does.
    from transformers.models.auto.image_processing_auto import (
        IMAGE_PROCESSOR_MAPPING_NAMES,
    )
    from transformers.models.auto.processing_auto import (
        PROCESSOR_MAPPING_NAMES,
        processor_class_from_name,
    )

    assert (
        "glm4v_moe" not in IMAGE_PROCESSOR_MAPPING_NAMES
        or not IMAGE_PROCESSOR_MAPPING_NAMES["glm4v_moe"]
    )
    family = processor_class_from_name(
        PROCESSOR_MAPPING_NAMES["glm4v_moe"]
    ).__module__.split(".")[2]
    image_processor = resolve("glm4v_moe").load_processor().image_processor
    assert (
        type(image_processor).__name__ in IMAGE_PROCESSOR_MAPPING_NAMES[family].values()
    )


@pytest.mark.parametrize("model_type", ["internvl", "aya_vision"])
def test_config_image_token_is_the_token_hf_expands_to(model_type) -> None:
    # InternVL takes its image token from another tokenizer attribute; Aya Vision
    # expands <image> into another token. A synthetic config names, as a
    # checkpoint's does, a token the processor's output for one image holds.
    from mmport.hf.processor import call_processor
    from mmport.hf.wrappers import wrapped_placeholder
    from mmport.media import make_image

    snapshot = resolve(model_type)
    processor = snapshot.load_processor()
    ids = call_processor(
        processor, wrapped_placeholder(processor), [make_image(64, 64, 0)]
    )["input_ids"][0].tolist()
    assert ids.count(snapshot.model_image_token_id()) > 1


@pytest.mark.parametrize("model_type", ["llava", "internvl"])
def test_cache_key_covers_every_function_that_builds_a_snapshot(
    model_type, tmp_path
) -> None:
    # LLaVA measures its tower on a tiny twin; InternVL's build calls the processor
    # to find the token it expands to. Every mmport function that runs during a
    # build must live in a module the cache key hashes, or an edit there would
    # serve a stale snapshot.
    import importlib
    import pkgutil
    import sys

    import mmport
    from mmport.sources.fingerprint import builder_modules
    from mmport.sources.synthetic import build_synthetic

    # Import everything first, so that only functions the build itself calls are seen.
    for module in pkgutil.walk_packages(mmport.__path__, "mmport."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    ran: set[str] = set()

    def record(frame, event, arg):
        module = frame.f_globals.get("__name__", "")
        if (
            event == "call"
            and module.startswith("mmport.")
            and frame.f_code.co_name != "<module>"
        ):
            ran.add(module)

    sys.setprofile(record)
    try:
        build_synthetic(model_type, tmp_path)
    finally:
        sys.setprofile(None)
    assert (
        "mmport.sources.measure" in ran or "mmport.analyzers.fields" in ran
    )  # the probe saw the build
    assert ran <= builder_modules(), sorted(ran - builder_modules())


def test_optional_sub_config_the_default_leaves_off_is_built() -> None:
    # NemotronH-Omni's default config leaves its optional Parakeet audio_config off;
    # a checkpoint that processes audio has it, and its model_type is what leads
    # transformers' auto mappings to the feature extractor.
    from transformers.models.auto.feature_extraction_auto import (
        FEATURE_EXTRACTOR_MAPPING_NAMES,
    )

    snapshot = resolve("nemotron_h_omni")
    audio_type = snapshot.config_dict["audio_config"]["model_type"]
    assert (
        type(snapshot.load_processor().feature_extractor).__name__
        == FEATURE_EXTRACTOR_MAPPING_NAMES[audio_type]
    )


SIBLING_NAMES_THE_SETTING = """
    class ImageProc:
        image_mean = [0.5, 0.5, 0.5]

        def __init__(self, **kwargs):
            if (norm_mean := kwargs.pop("norm_mean", None)) is not None:
                kwargs.setdefault("image_mean", norm_mean)
            self.image_mean = kwargs.get("image_mean", self.image_mean)

    class VideoProc:
        norm_mean = None
        unused = None

        def _preprocess(self, videos):
            return [v - self.norm_mean for v in videos]
"""


def test_setting_left_none_is_filled_from_the_sibling_that_names_it(tmp_path) -> None:
    # The image processor's constructor takes a checkpoint's `norm_mean` as its
    # `image_mean`; the video processor reads `norm_mean` when called. Only what
    # is read at call time, and left None, is filled.
    import importlib.util
    import sys
    import textwrap

    from mmport.sources.siblings import fill_from_siblings

    path = tmp_path / "processing_siblings_example.py"
    path.write_text(textwrap.dedent(SIBLING_NAMES_THE_SETTING))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    parts = {
        "image_processor": module.ImageProc(),
        "video_processor": module.VideoProc(),
    }
    assert fill_from_siblings(parts) == {
        "video_processor": ["norm_mean from image_processor.image_mean"]
    }
    assert (
        parts["video_processor"].norm_mean == [0.5, 0.5, 0.5]
        and parts["video_processor"].unused is None
    )
    parts["video_processor"].norm_mean = [0.1, 0.2, 0.3]  # a value of its own is kept
    assert fill_from_siblings(parts) == {}


def test_synthetic_video_processor_normalizes_as_its_sibling_does() -> None:
    processor = resolve("nemotron_h_omni").load_processor()
    assert list(processor.video_processor.norm_mean) == list(
        processor.image_processor.image_mean
    )
    assert list(processor.video_processor.norm_std) == list(
        processor.image_processor.image_std
    )


@pytest.mark.parametrize("model_type", ["llava_next_video", "internvl"])
def test_synthetic_video_frames_feed_the_tower_images_do(model_type) -> None:
    # transformers' default video processor and tower are written apart (LLaVA-NeXT-Video's
    # frames at 224 px, its CLIP at 336); a checkpoint sizes frames for the tower.
    snapshot = resolve(model_type)
    processor = snapshot.load_processor()
    tower = lookup_config(snapshot.config_dict, "image_size")
    tower = list(tower) if isinstance(tower, list | tuple) else [tower, tower]
    for attr in ("size", "crop_size"):
        for part in (processor.image_processor, processor.video_processor):
            size = getattr(part, attr, None)
            if size is not None and size.get("height") is not None:
                assert [size["height"], size["width"]] == tower, (
                    type(part).__name__,
                    attr,
                    size,
                    tower,
                )


@pytest.mark.parametrize("model_type", ["qwen3_vl", "mistral3"])
def test_synthetic_processor_patchifies_as_its_tower_embeds(model_type) -> None:
    # Qwen3-VL's default processor is Qwen2-VL's (14 px patches) while its tower embeds
    # 16 px ones; Mistral 3's Pixtral processor the other way round. A checkpoint pairs them.
    snapshot = resolve(model_type)
    processor = snapshot.load_processor()
    tower = snapshot.config_dict["vision_config"]["patch_size"]
    for part in (
        processor.image_processor,
        getattr(processor, "video_processor", None),
    ):
        patch = getattr(part, "patch_size", None)
        if patch is not None:
            assert (
                patch["height"]
                if isinstance(patch, dict) or hasattr(patch, "height")
                else patch
            ) == tower


def test_a_processor_patch_of_another_concept_is_left_alone() -> None:
    # Step3p7's image processor calls its 504 px crop window `patch_size`; its tower's patch is 14.
    snapshot = resolve("step3p7")
    processor = snapshot.load_processor()
    assert (
        processor.image_processor.patch_size
        != snapshot.config_dict["vision_config"]["patch_size"]
    )


def test_a_processor_that_writes_the_bos_gets_a_tokenizer_that_adds_none() -> None:
    # Emu3's processor prepends tokenizer.bos_token to every prompt: its checkpoints'
    # tokenizer adds no BOS of its own, or each prompt would open twice.
    processor = resolve("emu3").load_processor()
    tokenizer = processor.tokenizer
    ids = processor(text=["hi"], return_tensors="pt")["input_ids"][0].tolist()
    assert ids[0] == tokenizer.bos_token_id and ids[1] != tokenizer.bos_token_id
    assert tokenizer("hi")["input_ids"][0] != tokenizer.bos_token_id


def test_an_id_the_processor_looks_up_by_text_is_where_the_config_names_it() -> None:
    # GLM-4V keeps `self.video_start_id = convert_tokens_to_ids("<|begin_of_video|>")`; its config
    # names the same id `video_start_token_id`, and vLLM's port reads the config's.
    from mmport.sources.defaults import looked_up_ids
    from mmport.sources.synthetic import processor_class_for

    snapshot = resolve("glm4v")
    tokenizer = snapshot.load_processor().tokenizer
    config = snapshot.load_config()
    pinned = 0
    for attribute, text in looked_up_ids(processor_class_for("glm4v")).items():
        key = attribute.removesuffix("_id") + "_token_id"
        if getattr(config, key, None) is not None:
            assert tokenizer.convert_tokens_to_ids(text) == getattr(config, key), (
                attribute,
                text,
            )
            pinned += 1
    assert pinned


@pytest.mark.parametrize("model_type", ["glm4v", "qwen2_vl", "internvl"])
def test_every_token_id_the_config_names_is_a_token_and_video_tags_are_whole(
    model_type,
) -> None:
    # A checkpoint's config and vocabulary agree: each `*_token_id` holds a token, and a tag
    # HF writes around each video frame (GLM-4V's <|begin_of_image|>) is one token, not its characters.
    from mmport.hf.processor import call_processor
    from mmport.media import make_video, video_metadata
    from mmport.sources.synthetic import written_tags

    snapshot = resolve(model_type)
    processor, config = snapshot.load_processor(), snapshot.config_dict
    tokenizer = processor.tokenizer
    layers = [
        config,
        *[v for v in config.values() if isinstance(v, dict) and "model_type" in v],
    ]
    named = {
        k: v
        for layer in layers
        for k, v in layer.items()
        if k.endswith("_token_id") and isinstance(v, int)
    }
    assert named
    for key, value in named.items():
        assert tokenizer.convert_ids_to_tokens(value) is not None, (key, value)
    video = (make_video(4, 64, 64, 0), video_metadata(4, 64, 64, fps=2.0))
    ids = call_processor(processor, processor.video_token, [], videos=[video])[
        "input_ids"
    ][0].tolist()
    for tag in written_tags((tokenizer.decode(ids),)):
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1, tag


def test_a_tag_written_as_text_sits_at_the_config_id_whose_name_spells_it() -> None:
    # GLM-4V writes <|begin_of_image|> before each video frame; its config calls that id
    # image_start_token_id. On a checkpoint they agree, and vLLM's port writes the config's id.
    snapshot = resolve("glm4v")
    tokenizer, config = snapshot.load_processor().tokenizer, snapshot.load_config()
    for key in ("image_start_token_id", "image_end_token_id"):
        spelt = tokenizer.convert_ids_to_tokens(getattr(config, key))
        words = set(key.removesuffix("_token_id").split("_"))
        assert {
            "start" if w == "begin" else w for w in spelt.strip("<|>").split("_")
        } - {"of"} == words, (key, spelt)


@pytest.mark.parametrize("model_type", ["idefics3", "smolvlm"])
def test_a_fixed_size_tower_takes_the_tiles_its_processor_cuts(model_type) -> None:
    # The default Idefics3 processor cuts 364 px tiles of 169 positions; the default tower
    # (224 px, 32 px patches) refuses them. The snapshot's tower takes the processor's tiles,
    # so HF's own (tiny) model runs an ordinary image, as a checkpoint's does.
    from mmport.runtime.device import placement
    from mmport.runtime.hf_model import load_model
    from mmport.verify.reference import HFReference

    hf = HFReference(resolve(model_type))
    tiles = hf.single(hf.reference_items("image")[0]).inputs["pixel_values"]
    assert hf.snapshot.config_dict["vision_config"]["image_size"] == tiles.shape[-1]
    twin = load_model(
        hf.snapshot, placement("cpu", "float32"), tiny=True, weights=False, seed=0
    )
    twin.logits(hf.single(hf.reference_items("image")[0]).inputs)
