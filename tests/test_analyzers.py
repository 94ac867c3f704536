"""Analyzer examples: dedented HF-style source → the fact derived from it."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import types

import pytest

from mmport.analyzers.callblock import analyze_call_block
from mmport.analyzers.callparams import call_parameter
from mmport.analyzers.count import analyze_replacement
from mmport.analyzers.itemprefix import analyze_item_prefix
from mmport.analyzers.layout import analyze_layout
from mmport.analyzers.replacement import analyze_replacement_text
from mmport.analyzers.settings import unread_geometry_factors
from mmport.analyzers.textprefix import analyze_text_prefix
from mmport.analyzers.wrappers import analyze_placeholder_wrappers
from mmport.errors import AnalysisError
from mmport.hf.wrappers import wrapped_placeholder
from mmport.spec import Source


def _load(tmp_path, source: str, name: str = "Proc") -> type:
    path = tmp_path / f"processing_example_{abs(hash(source))}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # inspect finds sources through sys.modules
    spec.loader.exec_module(module)
    return getattr(module, name)


def _analyzed_hook(tmp_path, source: str):
    """``Proc`` of ``source`` and the replacement text derived for it, with ``ImageProc`` beside it."""
    proc = _load(tmp_path, source)
    return proc, analyze_replacement_text(proc, sys.modules[proc.__module__].ImageProc)


def _port_functions(count) -> dict:
    """The functions a port defines for ``count`` (its helpers, then its replacement), by name."""
    namespace: dict = {}
    for helper in (*count.helpers, count.replacement):
        exec(helper.code, namespace)
    return namespace


VALID_GRID = """
    class Proc:
        def replace_image_token(self, image_inputs, image_idx):
            pixel_values = image_inputs["pixel_values"][image_idx]
            height, width = pixel_values.shape[-2:]
            n = (height // self.patch_size) * (width // self.patch_size)
            return self.image_token * n
"""

VALID_FIXED = """
    class Proc:
        def replace_image_token(self, image_inputs, image_idx):
            return self.image_seq_length * self.image_token
"""

INVALID_READS_MORE = """
    class Proc:
        def replace_image_token(self, image_inputs, image_idx):
            rows = image_inputs["rows"][image_idx]
            return self.image_token * rows
"""


def test_grid_count_keeps_statements_and_uses_geometry(tmp_path) -> None:
    facts = analyze_replacement(_load(tmp_path, VALID_GRID))
    assert facts.token_attr == "image_token"
    assert facts.count.statements == (
        "n = (height // processor.patch_size) * (width // processor.patch_size)",
    )
    assert facts.count.result == "n"
    assert facts.count.uses_geometry
    assert facts.count.source.line == 3


def test_fixed_count_either_operand_order(tmp_path) -> None:
    facts = analyze_replacement(_load(tmp_path, VALID_FIXED))
    assert facts.count.result == "processor.image_seq_length"
    assert not facts.count.uses_geometry


def test_count_reading_more_than_geometry_is_refused(tmp_path) -> None:
    with pytest.raises(AnalysisError):
        analyze_replacement(_load(tmp_path, INVALID_READS_MORE))


INSERTING = """
    IMAGE_TOKEN = "<image>"
    class Proc:
        def __init__(self, tokenizer):
            tokenizer.add_bos_token = False
        def prepare_inputs_layout(self, images=None, text=None):
            return [f"{IMAGE_TOKEN * len(images)}{self.tokenizer.bos_token}{prompt}\\n" for prompt in text]
"""


def test_layout_fstring_means_insertion(tmp_path) -> None:
    update = analyze_layout(_load(tmp_path, INSERTING), Source("x", 1))
    assert (update.mode, update.target) == ("insert", "start")
    assert update.trailing_tokens == ("bos_token",)
    assert update.prompt_suffix == "\n"
    assert update.add_special_tokens is False


def test_plain_processor_replaces_placeholder(tmp_path) -> None:
    update = analyze_layout(_load(tmp_path, VALID_FIXED), Source("x", 1))
    assert (update.mode, update.target) == ("replace", "placeholder")
    assert update.add_special_tokens is True


# ColPali: its own prompt holds the placeholder and "<bos>"; the tokenizer's is off.
REPLACING_WITHOUT_BOS = """
    class Proc:
        def __init__(self, tokenizer):
            tokenizer.add_bos_token = False
        def prepare_inputs_layout(self, images=None, text=None):
            return images, [f"{self.image_token}{self.tokenizer.bos_token}{self.visual_prompt_prefix}\\n"]
        def replace_image_token(self, image_inputs, image_idx):
            return self.image_token * self.image_seq_length
"""


def test_bos_switch_holds_for_a_replacing_layout(tmp_path) -> None:
    update = analyze_layout(_load(tmp_path, REPLACING_WITHOUT_BOS), Source("x", 1))
    assert (update.mode, update.target) == ("replace", "placeholder")
    assert update.add_special_tokens is False
    assert update.special_tokens_source.line == 4


ANYRES = """
    import math

    class ImageProc:
        def _preprocess(self, images):
            image_sizes = []
            for image in images:
                image_sizes.append(get_image_size(image, "channels_first"))
            return BatchFeature(data={"pixel_values": images, "image_sizes": image_sizes})

    class Proc:
        def replace_image_token(self, image_inputs, image_idx):
            image_size = image_inputs["image_sizes"][image_idx]
            if not isinstance(image_size, (list, tuple)):
                image_size = image_size.tolist()
            orig_height, orig_width = image_size
            n = self._tiles(orig_height, orig_width) * self.tokens_per_tile
            return self.image_token * n

        def _tiles(self, height, width):
            return math.ceil(height / self.tile) * math.ceil(width / self.tile)
"""

PATCH_GRID = """
    class ImageProc:
        def get_number_of_image_patches(self, height, width, images_kwargs=None):
            grid_h, grid_w = height // self.patch_size, width // self.patch_size
            return grid_h * grid_w

        def _preprocess(self, images, grid_h, grid_w):
            grids = {}
            grids[0] = [[1, grid_h, grid_w]] * len(images)
            image_grid_thw = torch.tensor(grids)
            return BatchFeature(data={"pixel_values": images, "image_grid_thw": image_grid_thw})

    class Proc:
        def replace_image_token(self, image_inputs, image_idx):
            n = image_inputs["image_grid_thw"][image_idx].prod() // self.image_processor.merge_size**2
            return self.image_token * n
"""

# An image processor whose image_sizes are the sizes after its resize.
RESIZED_IMAGE_PROC = """
    class ImageProc:
        def _preprocess(self, images):
            resized = [self.resize(image) for image in images]
            image_sizes = [image.shape[-2:] for image in resized]
            return BatchFeature(data={"pixel_values": resized, "image_sizes": image_sizes})
"""

INVALID_RESIZED_SIZES = (
    RESIZED_IMAGE_PROC
    + """

    class Proc:
        def replace_image_token(self, image_inputs, image_idx):
            height, width = image_inputs["image_sizes"][image_idx]
            return self.image_token * (height // 16)
"""
)


def test_original_size_read_becomes_the_item_size_and_helpers_travel(tmp_path) -> None:
    proc = _load(tmp_path, ANYRES)
    image_proc = sys.modules[proc.__module__].ImageProc
    count = analyze_replacement(proc, "image", image_proc).count
    # The tensor-to-list guard cannot fire on a tuple, so it is left out.
    assert count.statements == (
        "image_size = (image_height, image_width)",
        "orig_height, orig_width = image_size",
        "n = _tiles(processor, orig_height, orig_width) * processor.tokens_per_tile",
    )
    assert count.size_dependent and not count.uses_geometry
    assert [h.name for h in count.helpers] == ["_tiles"]
    assert count.helpers[0].code.startswith("def _tiles(processor, height, width):")
    assert count.imports == ("import math",)
    assert [(key, kind, source.line) for key, kind, source in count.item_reads] == [
        ("image_sizes", "size", 8)
    ]


def test_patch_grid_product_becomes_the_image_processors_patch_count(tmp_path) -> None:
    proc = _load(tmp_path, PATCH_GRID)
    image_proc = sys.modules[proc.__module__].ImageProc
    count = analyze_replacement(proc, "image", image_proc).count
    assert count.statements == (
        # The grid is HF's preprocessing under the request (configured), the divisor the hook's
        # own processor as HF built it.
        "n = get_number_of_image_patches(configured.image_processor, image_height, image_width, {}) "
        "// processor.image_processor.merge_size**2",
    )
    assert [h.owner for h in count.helpers] == ["ImageProc.get_number_of_image_patches"]
    assert count.helpers[0].code.startswith(
        "def get_number_of_image_patches(image_processor, height, width"
    )


def test_sizes_of_resized_images_are_not_taken_for_the_original(tmp_path) -> None:
    # These sizes are the processed ones: the count stays a processed-geometry
    # rule (refused unless the image processor fixes that size), never the item's.
    proc = _load(tmp_path, INVALID_RESIZED_SIZES)
    count = analyze_replacement(
        proc, "image", sys.modules[proc.__module__].ImageProc
    ).count
    assert not count.size_dependent and not count.item_reads
    assert count.uses_geometry


PATCHES_AFTER_RESIZE = (
    RESIZED_IMAGE_PROC
    + """
        def get_number_of_image_patches(self, height, width, images_kwargs=None):
            images_kwargs = images_kwargs or {}
            longest = images_kwargs.get("longest", self.longest)
            if max(height, width) > longest:
                height, width = height * longest // max(height, width), width * longest // max(height, width)
            return (height // 16) * (width // 16)

    class Proc:
        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            height, width = image_inputs["image_sizes"][image_idx]
            return (self.image_token * (width // 16) + "\\n") * (height // 16)
"""
)


def test_sizes_of_resized_images_follow_the_resize_the_patch_count_makes(
    tmp_path,
) -> None:
    # The same processed sizes, where get_number_of_image_patches resizes
    # height and width before counting: that resize is the processed size.
    proc = _load(tmp_path, PATCHES_AFTER_RESIZE)
    image_proc = sys.modules[proc.__module__].ImageProc
    count = analyze_replacement_text(proc, image_proc)
    assert [(key, kind) for key, kind, _ in count.item_reads] == [
        ("image_sizes", "resized")
    ]
    assert [h.name for h in count.helpers] == [
        "resized_image_size"
    ]  # the count itself is not carried
    namespace = _port_functions(count)
    stub = types.SimpleNamespace(
        image_token="x", image_processor=types.SimpleNamespace(longest=64)
    )
    for height, width in ((32, 48), (300, 90)):
        # The image processor's patch count is what the port's layout must add up to.
        patches = image_proc.get_number_of_image_patches(
            stub.image_processor, height, width
        )
        assert (
            namespace["replace_image_token"](stub, stub, height, width).count("x")
            == patches
        )


APPENDS_SEP = """
    class Proc:
        def __call__(self, images=None, text=None, **kwargs):
            text = [f"{sample}{self.tokenizer.sep_token}" for sample in text]
            return text
"""


def test_call_appending_tokenizer_tokens_gives_suffix_tokens(tmp_path) -> None:
    update = analyze_layout(_load(tmp_path, APPENDS_SEP), Source("x", 1))
    assert (update.mode, update.suffix_tokens) == ("replace", ("sep_token",))
    assert update.suffix_source.line == 4


PREPENDS_BOS_IN_LAYOUT = """
    class Proc:
        def __init__(self, tokenizer):
            self.bos_token = tokenizer.bos_token
        def prepare_inputs_layout(self, images=None, text=None, **kwargs):
            if text is not None and kwargs.get("add_special_tokens", True):
                text = [f"{self.bos_token}{sample}" for sample in text]
            return images, text
"""

PREPENDS_BOS_UNLESS_PRESENT = """
    class Proc:
        def __call__(self, images=None, text=None, **kwargs):
            bos_token = self.tokenizer.bos_token or self.tokenizer.eos_token
            if text is not None:
                text = [prompt if prompt.startswith(bos_token) else bos_token + prompt for prompt in text]
            return text
"""

PREPENDS_IMAGE_TOKEN = """
    class Proc:
        def __init__(self, tokenizer):
            self.image_token = tokenizer.image_token
        def prepare_inputs_layout(self, images=None, text=None, **kwargs):
            return images, [f"{self.image_token}{sample}" for sample in text]
"""


def test_layout_prepending_bos_read_through_the_constructor(tmp_path) -> None:
    prefix = analyze_text_prefix(_load(tmp_path, PREPENDS_BOS_IN_LAYOUT))
    assert (prefix.tokens, prefix.unless, prefix.only_with_special_tokens) == (
        ("bos_token",),
        "",
        True,
    )
    assert prefix.source.line == 7


def test_call_prepending_bos_unless_present_falls_back_to_eos(tmp_path) -> None:
    proc = _load(tmp_path, PREPENDS_BOS_UNLESS_PRESENT)
    prefix = analyze_text_prefix(proc)
    assert (prefix.tokens, prefix.unless, prefix.only_with_special_tokens) == (
        ("bos_token", "eos_token"),
        "starts_with",
        False,
    )
    assert analyze_layout(proc, Source("x", 1)).prefix == prefix


def test_prepending_a_token_that_is_not_a_special_token_is_no_text_prefix(
    tmp_path,
) -> None:
    assert analyze_text_prefix(_load(tmp_path, PREPENDS_IMAGE_TOKEN)) is None
    assert analyze_text_prefix(_load(tmp_path, APPENDS_SEP)) is None


PREPENDS_BLOCK = """
    class Proc:
        def __call__(self, images=None, text=None, **kwargs):
            text_encoding = self.tokenizer(text)
            if images is not None:
                image_tokens = self.image_token.content * self.num_query_tokens
                image_text_encoding = self.tokenizer(image_tokens, add_special_tokens=False)
                for k in text_encoding:
                    text_encoding[k] = [image_text_encoding[k] + sample for sample in text_encoding[k]]
            return text_encoding
"""


def test_call_block_before_the_sample_is_inserted_at_start(tmp_path) -> None:
    block = analyze_call_block(_load(tmp_path, PREPENDS_BLOCK))
    assert block.facts.token_attr == "image_token"
    assert block.facts.count.result == "processor.num_query_tokens"
    assert block.facts.count.strategy == "derived"
    assert (block.update.mode, block.update.target) == ("insert", "start")


def test_call_block_after_the_sample_is_inserted_at_end(tmp_path) -> None:
    source = PREPENDS_BLOCK.replace(
        "image_text_encoding[k] + sample", "sample + image_text_encoding[k]"
    )
    assert analyze_call_block(_load(tmp_path, source)).update.target == "end"


def test_call_without_block_is_refused(tmp_path) -> None:
    with pytest.raises(AnalysisError):
        analyze_call_block(_load(tmp_path, APPENDS_SEP))


# InstructBLIP-Video: the token stands in a product; the other factors are the count.
PREPENDS_VIDEO_PRODUCT = """
    class Proc:
        def __call__(self, images=None, text=None, **kwargs):
            text_encoding = self.tokenizer(text)
            if images is not None:
                video_tokens = self.video_token.content * self.num_query_tokens * 4
                video_text_encoding = self.tokenizer(video_tokens, add_special_tokens=False)
                for k in text_encoding:
                    text_encoding[k] = [video_text_encoding[k] + sample for sample in text_encoding[k]]
            return text_encoding
"""


def test_call_block_reads_the_count_from_a_product_chain(tmp_path) -> None:
    block = analyze_call_block(_load(tmp_path, PREPENDS_VIDEO_PRODUCT), "video")
    assert block.facts.token_attr == "video_token"
    assert block.facts.count.result == "processor.num_query_tokens * 4"
    assert (block.update.mode, block.update.target) == ("insert", "start")
    assert block.facts.count.source.line == 6


def test_call_block_token_may_stand_between_factors(tmp_path) -> None:
    source = PREPENDS_VIDEO_PRODUCT.replace(
        "self.video_token.content * self.num_query_tokens * 4",
        "self.num_query_tokens * self.video_token * 4",
    )
    assert (
        analyze_call_block(_load(tmp_path, source), "video").facts.count.result
        == "processor.num_query_tokens * 4"
    )


def test_call_block_of_another_modality_is_refused(tmp_path) -> None:
    with pytest.raises(AnalysisError, match="image_token"):
        analyze_call_block(_load(tmp_path, PREPENDS_VIDEO_PRODUCT), "image")


def test_call_block_counted_per_item_is_refused(tmp_path) -> None:
    # CSM's shape: the count comes from each item (a local), not from the processor.
    source = PREPENDS_VIDEO_PRODUCT.replace(
        "self.num_query_tokens * 4", "num_video_tokens"
    )
    with pytest.raises(AnalysisError):
        analyze_call_block(_load(tmp_path, source), "video")


TAKES_VIDEOS_AS_IMAGES = """
    VideoInput = list

    class Proc:
        def __call__(self, images: VideoInput | None = None, text=None, return_tensors=None, **kwargs):
            text_encoding = self.tokenizer(text, **kwargs)
            encoding = self.video_processor(images, return_tensors=return_tensors)
            return encoding
"""


def test_videos_taken_under_another_parameter_reach_the_video_processor_alone(
    tmp_path,
) -> None:
    parameter = call_parameter(_load(tmp_path, TAKES_VIDEOS_AS_IMAGES), "video")
    assert (parameter.name, parameter.forwards_settings) == ("images", False)
    assert (parameter.source.line, parameter.call_source.line) == (5, 7)


def test_parameter_handed_to_the_video_processor_with_its_settings(tmp_path) -> None:
    # No annotation: the parameter is the one the video processor's call receives.
    source = TAKES_VIDEOS_AS_IMAGES.replace(
        "images: VideoInput | None", "clips"
    ).replace("(images, return_tensors=return_tensors)", "(clips, **kwargs)")
    parameter = call_parameter(_load(tmp_path, source), "video")
    assert (parameter.name, parameter.forwards_settings) == ("clips", True)


def test_usual_videos_parameter_is_no_call_parameter(tmp_path) -> None:
    source = TAKES_VIDEOS_AS_IMAGES.replace(
        "images: VideoInput | None = None",
        "images=None, videos: VideoInput | None = None",
    )
    assert call_parameter(_load(tmp_path, source), "video") is None


INVALID_BOUND_IN_BRANCH = """
    class Proc:
        def replace_image_token(self, image_inputs, image_idx):
            if image_inputs["batch_num_images"][0] > 1:
                n = self.num_image_tokens + 1
            else:
                n = self.num_image_tokens
            return self.image_token * n
"""


def test_count_bound_inside_a_branch_that_reads_the_batch_is_refused(tmp_path) -> None:
    with pytest.raises(AnalysisError, match="'n'"):
        analyze_replacement(_load(tmp_path, INVALID_BOUND_IN_BRANCH))


TILED = '''
    class ImageProc:
        def get_number_of_image_patches(self, height, width, images_kwargs=None):
            num_rows, num_cols = height // self.tile, width // self.tile
            return num_rows * num_cols + 1, num_rows, num_cols

        def _preprocess(self, images, do_pan_and_scan):
            if do_pan_and_scan:
                num_crops = self.crops(images)
            else:
                num_crops = [0 for _ in images]
            encoding = BatchFeature(data={"pixel_values": images, "num_crops": num_crops})
            rows = self.rows(images)
            encoding["rows"] = rows
            return encoding

    class Proc:
        def _process_images(self, images, **kwargs):
            processed_images = self.image_processor(images, **kwargs)
            return processed_images, [self.replace_image_token(processed_images, i, **kwargs) for i in range(len(images))]

        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            """HF's docstring stays behind."""
            rows = [row for row_list in image_inputs["rows"] for row in row_list]
            num_crops = image_inputs["num_crops"][image_idx]
            return f"{self.boi_token}{self.image_token * rows[image_idx]}{self.eoi_token}" * (num_crops + 1)
'''

INVALID_READS_PIXELS = """
    class Proc:
        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            n = image_inputs["pixel_values"][image_idx].shape[0]
            return f"{self.boi_token}{self.image_token * n}{self.eoi_token}"
"""


def test_replacement_hook_travels_whole_with_its_reads_rewritten(tmp_path) -> None:
    proc = _load(tmp_path, TILED)
    image_proc = sys.modules[proc.__module__].ImageProc
    count = analyze_replacement_text(proc, image_proc)
    assert count.strategy == "derived" and count.size_dependent
    code = count.replacement.code
    # Rows come from the patch tuple; crops are 0 while pan-and-scan is off, and under it what
    # HF's image processor makes of a blank image of the item's size, as _process_images calls it.
    assert code.startswith(
        "def replace_image_token(processor, configured, image_height: int, image_width: int, **kwargs) -> str:"
    )
    assert (
        "get_number_of_image_patches(configured.image_processor, image_height, image_width, kwargs)[1]"
        in code
    )
    assert (
        'preprocess_blank_image(processor.image_processor, image_height, image_width, kwargs)["num_crops"][0]'
        in code
    )
    assert (
        'if kwargs.get("do_pan_and_scan", getattr(processor.image_processor, "do_pan_and_scan", None)) else 0'
        in code
    )
    assert "preprocess_blank_image" in {h.name for h in count.helpers}
    assert (
        count.preprocess_source.code
        == "processed_images = self.image_processor(images, **kwargs)"
    )
    assert "image_inputs" not in code and "docstring" not in code
    assert {(key, kind) for key, kind, _ in count.item_reads} == {
        ("rows", "item"),
        ("num_crops", "constant"),
    }


def test_replacement_reading_the_processed_pixels_is_refused(tmp_path) -> None:
    with pytest.raises(AnalysisError, match="processed item"):
        analyze_replacement_text(_load(tmp_path, INVALID_READS_PIXELS), object)


NAMED_PATCH_COUNT = """
    class ImageProc:
        def _preprocess(self, images):
            num_patches = [len(self.tiles(image)) for image in images]
            return BatchFeature(data={"pixel_values": images, "num_patches": num_patches})

        def get_number_of_image_patches(self, height, width, images_kwargs=None):
            num_patches = 1 + (height // self.tile) * (width // self.tile)
            return num_patches

    class Proc:
        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            num_patches = image_inputs["num_patches"]
            return f"<img>{self.image_token * self.seq_len * num_patches[image_idx]}</img>"
"""


def test_named_patch_count_becomes_the_image_processors_count(tmp_path) -> None:
    proc = _load(tmp_path, NAMED_PATCH_COUNT)
    image_proc = sys.modules[proc.__module__].ImageProc
    count = analyze_replacement_text(proc, image_proc)
    assert [(key, kind) for key, kind, _ in count.item_reads] == [
        ("num_patches", "count")
    ]
    namespace = _port_functions(count)
    stub = types.SimpleNamespace(
        image_token="x", seq_len=2, image_processor=types.SimpleNamespace(tile=10)
    )
    # The port's replacement follows the image processor's own count for each size.
    for height, width in ((10, 10), (35, 21)):
        patches = image_proc.get_number_of_image_patches(
            stub.image_processor, height, width
        )
        text = namespace["replace_image_token"](stub, stub, height, width)
        assert text == "<img>" + "x" * 2 * patches + "</img>"


RESIZED_SIZES = (
    RESIZED_IMAGE_PROC
    + """

    class Proc:
        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            height, width = image_inputs["image_sizes"][image_idx]
            return (self.image_token * (width // 16) + "\\n") * (height // 16)

        def _get_num_multimodal_tokens(self, image_sizes=None, **kwargs):
            if image_sizes is not None:
                images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]
                longest = images_kwargs.get("longest", None) or self.image_processor.longest
                unused = []
                for height, width in image_sizes:
                    resized_height, resized_width = min(height, longest), min(width, longest)
                    unused.append(resized_height)
            return unused
"""
)


def test_resized_sizes_follow_the_processors_token_api(tmp_path) -> None:
    proc, count = _analyzed_hook(tmp_path, RESIZED_SIZES)
    assert [(key, kind) for key, kind, _ in count.item_reads] == [
        ("image_sizes", "resized")
    ]
    resized = next(h for h in count.helpers if h.name == "resized_image_size")
    # The loop-invariant slice travels (not the list the loop fills); the merged kwargs are the hook's.
    assert (
        "longest = images_kwargs.get" in resized.code and "unused" not in resized.code
    )
    assert (
        "resized_image_size(configured, image_height, image_width, kwargs)"
        in count.replacement.code
    )
    namespace = _port_functions(count)
    stub = types.SimpleNamespace(
        image_token="x", image_processor=types.SimpleNamespace(longest=64)
    )
    for height, width in ((32, 48), (300, 90)):
        fitted = (
            min(height, 64),
            min(width, 64),
        )  # the HF loop's resize, for these sizes
        assert namespace["replace_image_token"](stub, stub, height, width) == (
            "x" * (fitted[1] // 16) + "\n"
        ) * (fitted[0] // 16)


TOKEN_COUNT_OUTPUT = """
    class ImageProc:
        model_input_names = ["pixel_values", "num_soft_tokens_per_image"]

    class Proc:
        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            num_soft_tokens = image_inputs["num_soft_tokens_per_image"][image_idx]
            return f"<boi>{self.image_token * num_soft_tokens}<eoi>"

        def _get_num_multimodal_tokens(self, image_sizes=None, **kwargs):
            merged = self._merge_kwargs(**kwargs)
            images_kwargs = merged["images_kwargs"]
            pool = images_kwargs.get("pool", None) or self.image_processor.pool
            num_image_tokens = []
            for image_size in image_sizes:
                cells = (image_size[0] // pool) * (image_size[1] // pool)
                num_image_tokens.append(max(cells, 1))
            return num_image_tokens
"""


def test_output_named_as_a_token_count_is_the_token_apis_count(tmp_path) -> None:
    proc, count = _analyzed_hook(tmp_path, TOKEN_COUNT_OUTPUT)
    assert [(key, kind) for key, kind, _ in count.item_reads] == [
        ("num_soft_tokens_per_image", "tokens")
    ]
    namespace = _port_functions(count)
    stub = types.SimpleNamespace(
        image_token="x", image_processor=types.SimpleNamespace(pool=8)
    )
    api = types.SimpleNamespace(
        _merge_kwargs=lambda **kw: {"images_kwargs": {}},
        image_processor=stub.image_processor,
    )
    for height, width in ((8, 8), (64, 20), (3, 3)):
        # HF's own token API on this size is the count the port must give.
        expected = proc._get_num_multimodal_tokens(api, image_sizes=[(height, width)])[
            0
        ]
        assert (
            namespace["replace_image_token"](stub, stub, height, width)
            == "<boi>" + "x" * expected + "<eoi>"
        )


HOOK_ENTRY = """
    class ImageProc:
        def get_grid(self, height, width, images_kwargs=None):
            tile = (images_kwargs or {}).get("tile", self.tile)
            return [-(-height // tile), -(-width // tile)], 1

    class Proc:
        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            rows, cols = image_inputs["image_grids"][image_idx]
            return ((self.image_token * cols) + "\\n") * rows

        def _get_num_multimodal_tokens(self, image_sizes=None, **kwargs):
            images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]
            num_image_tokens = []
            for image_size in image_sizes:
                image_grid, num_crops = self.image_processor.get_grid(*image_size, images_kwargs)
                text = self.replace_image_token({"image_grids": [image_grid]}, image_idx=0)
                num_image_tokens.append(len(text))
            return num_image_tokens
"""


def test_entry_the_token_api_hands_the_hook_is_recomputed_from_the_size(
    tmp_path,
) -> None:
    proc, count = _analyzed_hook(tmp_path, HOOK_ENTRY)
    assert [(key, kind) for key, kind, _ in count.item_reads] == [
        ("image_grids", "entry")
    ]
    entry = next(h for h in count.helpers if h.name == "image_grids_of_image")
    # The image processor method is transplanted, not called on HF's object.
    assert (
        "get_grid(processor.image_processor, height, width, images_kwargs)"
        in entry.code
    )
    assert any(h.name == "get_grid" for h in count.helpers)
    namespace = _port_functions(count)
    stub = types.SimpleNamespace(
        image_token="x", image_processor=types.SimpleNamespace(tile=16)
    )
    for height, width in ((16, 16), (40, 17)):
        grid, _ = sys.modules[proc.__module__].ImageProc.get_grid(
            stub.image_processor, height, width
        )
        expected = proc.replace_image_token(
            stub, {"image_grids": [grid]}, 0
        )  # HF's hook on HF's entry
        assert namespace["replace_image_token"](stub, stub, height, width) == expected


PART_OF_COUNT = """
    class ImageProc:
        def _preprocess(self, images):
            num_local_patches = [len(self.tiles(image)) for image in images]
            data = {"pixel_values": images, "num_local_patches": num_local_patches}
            return BatchFeature(data=data)

        def get_number_of_image_patches(self, height, width, images_kwargs=None):
            num_patches = 1  # global view
            if max(height, width) > self.tile:
                num_patches += -(-height // self.tile) * -(-width // self.tile)
            return num_patches

    class Proc:
        def replace_image_token(self, image_inputs, image_idx, **kwargs):
            num_crops = image_inputs["num_local_patches"][image_idx]
            return self.image_token * (4 + 2 * num_crops)
"""


def test_output_counting_part_of_the_patch_count_subtracts_its_start(tmp_path) -> None:
    proc = _load(tmp_path, PART_OF_COUNT)
    image_proc = sys.modules[proc.__module__].ImageProc
    rule = analyze_replacement(proc, image_processor_cls=image_proc).count
    assert [(key, kind) for key, kind, _ in rule.item_reads] == [
        ("num_local_patches", "part")
    ]
    assert rule.item_reads[0][2].code == "num_patches = 1  # global view"
    assert (
        "get_number_of_image_patches(configured.image_processor, image_height, image_width, {}) - 1"
        in "\n".join(rule.statements)
    )
    # A variant that starts from 0 has no part to take away: the count is the whole output.
    whole = _load(
        tmp_path,
        PART_OF_COUNT.replace("num_patches = 1  # global view", "num_patches = 0"),
    )
    with pytest.raises(AnalysisError):
        analyze_replacement(
            whole, image_processor_cls=sys.modules[whole.__module__].ImageProc
        )


WRAPPED_PLACEHOLDER = """
    class Proc:
        image_token = "<image>"
        image_start_token = "<image_start>"
        image_end_token = "<image_end>"

        @staticmethod
        def _has_wrappers(prompt, at, start, token, end):
            return prompt[:at].endswith(start) and prompt[at + len(token):].startswith(end)

        def validate_inputs(self, images=None, text=None, **kwargs):
            for prompt in text:
                for at in [i for i in range(len(prompt)) if prompt.startswith(self.image_token, i)]:
                    if not self._has_wrappers(prompt, at, self.image_start_token, self.image_token, self.image_end_token):
                        raise ValueError("wrap it")
"""


def test_placeholder_demanded_between_wrappers_is_written_wrapped(tmp_path) -> None:
    proc = _load(tmp_path, WRAPPED_PLACEHOLDER)
    wrappers = analyze_placeholder_wrappers(proc)
    assert (wrappers.before, wrappers.after) == ("image_start_token", "image_end_token")
    placeholder = wrapped_placeholder(proc())
    # The processor's own validation accepts the wrapped form and refuses the bare token.
    proc().validate_inputs(text=[f"a {placeholder} b"])
    with pytest.raises(ValueError):
        proc().validate_inputs(text=[f"a {proc.image_token} b"])
    assert (
        wrapped_placeholder(type("Plain", (), {"image_token": "<image>"})())
        == "<image>"
    )


TAGS_ITEMS = """
    class Proc:
        def __call__(self, images=None, text=None, **kwargs):
            merged = self._merge_kwargs(**kwargs)
            tag = merged["images_kwargs"].pop("tag_items", merged["tag_items"])
            tag = tag if tag is not None else self.default_tag_items
            processed, replacements = self._process_images(images)
            if text is not None:
                if replacements and tag:
                    replacements = self._tag(text, replacements, self.image_token)
            return replacements

        def _tag(self, text, replacements, token):
            tagged, seen = [], 0
            for sample in text:
                for n in range(sample.count(token)):
                    prefix = f"{self.tag_open}{n}{self.tag_close}"
                    tagged.append(prefix + replacements[seen])
                    seen += 1
            return tagged
"""


def test_call_numbering_each_replacement_gives_an_item_prefix(tmp_path) -> None:
    prefix = analyze_item_prefix(_load(tmp_path, TAGS_ITEMS), "image_token")
    assert prefix.text == 'f"{processor.tag_open}{item_idx}{processor.tag_close}"'
    assert prefix.source.line == 17
    # The switch keeps HF's own lines, so the port honours the same kwarg and default.
    assert prefix.condition == "tag" and prefix.condition_source.line == 9
    assert prefix.kwargs_name == "merged"
    assert prefix.setup == (
        'tag = merged["images_kwargs"].pop("tag_items", merged["tag_items"])',
        "tag = tag if tag is not None else processor.default_tag_items",
    )


def test_call_without_a_numbered_prefix_has_none(tmp_path) -> None:
    assert analyze_item_prefix(_load(tmp_path, APPENDS_SEP), "image_token") is None
    assert analyze_item_prefix(_load(tmp_path, TAGS_ITEMS), "video_token") is None


def test_item_prefix_switched_by_a_call_argument_is_refused(tmp_path) -> None:
    source = TAGS_ITEMS.replace(
        "tag = tag if tag is not None", "tag = tag if kwargs is not None"
    )
    with pytest.raises(AnalysisError, match="kwargs"):
        analyze_item_prefix(_load(tmp_path, source), "image_token")


def test_item_suffix_is_not_taken_for_a_prefix(tmp_path) -> None:
    source = TAGS_ITEMS.replace(
        "prefix + replacements[seen]", "replacements[seen] + prefix"
    )
    with pytest.raises(AnalysisError, match="prefix before"):
        analyze_item_prefix(_load(tmp_path, source), "image_token")


PROCESS_IMAGES_POPS = """
    class Proc:
        def _process_images(self, images, **kwargs):
            use_special = kwargs.pop("use_special_tokens")
            return self.image_processor(images, **kwargs), use_special

    class NamedProc:
        def _process_images(self, images, use_special_tokens, **kwargs):
            return self.image_processor(images, **kwargs), use_special_tokens
"""


def test_processor_kwargs_process_images_takes_are_passed_by_a_delegated_port(
    tmp_path,
) -> None:
    # Newer releases name the kwarg; older ones (5.20) pop it from **kwargs.
    from mmport.analyzers import _process_images_args

    popping = _load(tmp_path, PROCESS_IMAGES_POPS)
    named = sys.modules[popping.__module__].NamedProc
    assert (
        _process_images_args(popping, set())
        == _process_images_args(named, set())
        == ("use_special_tokens",)
    )
    # A popped name the merged image kwargs already carry arrives with them.
    assert _process_images_args(popping, {"use_special_tokens"}) == ()


# CSM: its own __call__ counts each audio, no hook. NemotronH-Omni: a hook, and a
# _process_audio that takes the scope as one dict (no **kwargs) and returns the counts.
EXPANDS_IN_OWN_CALL = """
    class NoHook:
        def __call__(self, text=None, audio=None, **kwargs):
            counts = [self._get_encoded_length(a.shape[-1]) for a in audio]
            return self.tokenizer([t.replace(self.audio_token, self.audio_token * counts[0]) for t in text])

    class ScopeAsOneDict:
        def __call__(self, text=None, audio=None, **kwargs):
            features, mask, counts = self._process_audio(audio, kwargs.get("audio_kwargs", {}))
            return self.tokenizer([self.replace_audio_token({"num_tokens": counts}, 0)])

        def replace_audio_token(self, audio_inputs, audio_idx, **kwargs):
            return self.audio_token * audio_inputs["num_tokens"][audio_idx]

        def _process_audio(self, audio, audio_kwargs):
            return self.feature_extractor(audio), None, [len(a) // 160 for a in audio]

    class DrivenByTheBaseCall:
        def __call__(self, text=None, audio=None, **kwargs):
            return super().__call__(text=text, audio=audio, **kwargs)

        def replace_audio_token(self, audio_inputs, audio_idx, **kwargs):
            return self.audio_token

        def _process_audio(self, audio, **kwargs):
            return self.feature_extractor(audio, **kwargs), []

    class BaseCall:
        def replace_audio_token(self, audio_inputs, audio_idx, **kwargs):
            return self.audio_token
"""


def test_own_call_without_a_hook_or_with_an_undrivable_process_method_is_named(
    tmp_path,
) -> None:
    from mmport.analyzers.owncall import own_call_reason

    no_hook = _load(tmp_path, EXPANDS_IN_OWN_CALL, "NoHook")
    module = sys.modules[no_hook.__module__]
    assert (
        own_call_reason(no_hook, "audio")
        == "NoHook expands placeholders in its own __call__ (no replace_audio_token)"
    )
    reason = own_call_reason(module.ScopeAsOneDict, "audio")
    assert "_process_audio(self, audio, audio_kwargs) takes no **kwargs" in reason, (
        reason
    )
    # A hook with a _process_audio the base call drives, or no __call__ of its own: the base call expands.
    assert own_call_reason(module.DrivenByTheBaseCall, "audio") is None
    assert own_call_reason(module.BaseCall, "audio") is None


GEOMETRY_FACTORS = """
    from typing import TypedDict

    class ImageKwargs(TypedDict, total=False):
        patch_size: int
        merge_size: int
        patch_expand_factor: int
        resample: int

    class ImageProc:
        valid_kwargs = ImageKwargs

        def _preprocess(self, images, patch_size, merge_size, patch_expand_factor, resample):
            for image in images:
                image = self.resize(image, resample=resample, factor=patch_size * merge_size * patch_expand_factor)
            return images
"""


def test_a_kwarg_hf_resizes_by_but_the_count_does_not_read_is_counted_by_hf(
    tmp_path,
) -> None:
    image_proc = _load(tmp_path, GEOMETRY_FACTORS, "ImageProc")()
    processor = types.SimpleNamespace(valid_processor_kwargs=None)
    # The count reads patch_size and merge_size (HF's token API), not the third factor.
    found = unread_geometry_factors(
        image_proc, "image", processor, {"patch_size", "merge_size"}
    )
    assert [s.name for s in found] == ["patch_expand_factor"]
    assert "self.resize(" in found[0].read_at.code
    # Passed to the resize as it is, resample sizes nothing; a count reading every factor follows them all.
    assert (
        unread_geometry_factors(
            image_proc,
            "image",
            processor,
            {"patch_size", "merge_size", "patch_expand_factor"},
        )
        == ()
    )


def test_modular_lineage_reads_the_base_a_modular_file_derives_a_config_from(
    tmp_path, monkeypatch
) -> None:
    # A package laid out as transformers' models/: a family whose modular file derives
    # its text config from another family's config class, imported relatively.
    from mmport.analyzers.language import modular_lineage

    package = tmp_path / "acme_models"
    for family, files in {
        "base": {
            "configuration_base.py": "class BaseConfig:\n"
            "    model_type = 'acme_base'\n"
            "    def __init__(self):\n"
            "        self.layer_types = ['full_attention', 'sliding_attention']\n"
        },
        "vision": {
            "configuration_vision.py": "class VisionTextConfig:\n"
            "    model_type = 'acme_vision_text'\n",
            "modular_vision.py": "import math\n"
            "from ..base.configuration_base import BaseConfig as Parent\n"
            "class VisionTextConfig(Parent):\n"
            "    model_type = 'acme_vision_text'\n",
        },
    }.items():
        (package / family).mkdir(parents=True)
        (package / family / "__init__.py").write_text("")
        for name, text in files.items():
            (package / family / name).write_text(text)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    from acme_models.base.configuration_base import BaseConfig
    from acme_models.vision.configuration_vision import VisionTextConfig

    assert modular_lineage(VisionTextConfig) == (
        BaseConfig.model_type,
        frozenset(BaseConfig().layer_types),
    )
    # A class no modular file names has no lineage.
    assert modular_lineage(BaseConfig) is None


def test_the_tie_flag_comes_from_the_config_that_holds_the_text_config() -> None:
    """vLLM copies ``tie_word_embeddings`` to the text config from the top config only:
    where neither has it, the port takes it from the nearest config above the text
    config that does (ColQwen2's ``vlm_config``), else HF's default, False."""
    from transformers import AutoConfig

    from mmport.analyzers.language import tied_embeddings

    assert tied_embeddings(AutoConfig.for_model("llava")) is None  # vLLM copies it
    colqwen2 = AutoConfig.for_model("colqwen2")
    found = tied_embeddings(colqwen2)
    holder = found.removeprefix("config.")
    assert hasattr(getattr(colqwen2, holder), "tie_word_embeddings")
    assert getattr(colqwen2, holder).get_text_config() is colqwen2.get_text_config()
    # No config on the way has the flag: HF reads it with a default of False.
    text = types.SimpleNamespace()
    inner = types.SimpleNamespace(text_config=text, get_text_config=lambda: text)
    outer = types.SimpleNamespace(inner_config=inner, get_text_config=lambda: text)
    assert tied_embeddings(outer) == ""
    inner.tie_word_embeddings = True
    assert tied_embeddings(outer) == "config.inner_config"
