"""Probes carry each item as the model's chat prompt writes it (mmport.hf.layout)."""

from __future__ import annotations

import pytest

from mmport.hf.layout import template_layouts, usable_layout
from mmport.sources import resolve
from mmport.verify.reference import HFReference

# The image and video parts of a Qwen2-VL-style chat template: each item between
# the vision start and end tokens, the turn opened by <|im_start|>.
QWEN_STYLE_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
)


@pytest.fixture(scope="module")
def qwen3_vl_with_template():
    snapshot = resolve("qwen3_vl")
    processor = snapshot.load_processor()
    processor.chat_template = QWEN_STYLE_TEMPLATE
    return snapshot, processor


def test_template_gives_the_placeholder_with_the_special_tokens_beside_it(
    qwen3_vl_with_template,
) -> None:
    _, processor = qwen3_vl_with_template
    tokens = {"image": processor.image_token, "video": processor.video_token}
    layouts = template_layouts(processor, tokens)
    for modality, token in tokens.items():
        # The turn's opening token and the text after the item are not the item's.
        assert (
            layouts[modality]
            == f"{processor.vision_start_token}{token}{processor.vision_end_token}"
        )


def test_no_template_no_layout() -> None:
    processor = resolve("llava").load_processor()
    processor.chat_template = None
    processor.tokenizer.chat_template = None
    assert template_layouts(processor, {"image": processor.image_token}) == {}


def test_a_layout_must_hold_the_placeholder_hf_expands() -> None:
    assert usable_layout("<a><image><b>", "<image>") == "<a><image><b>"
    assert (
        usable_layout("<image>", "<image>") is None
    )  # nothing around it: the placeholder itself
    assert (
        usable_layout("<img>", "<IMG_CONTEXT>") is None
    )  # another token (InternVL's <image> vs its context token)
    assert usable_layout(None, "<image>") is None


def test_reference_probes_in_the_layout_vllm_writes() -> None:
    # What vLLM's registered class writes per item (its get_placeholder_str), handed in by the backend.
    snapshot = resolve("qwen3_vl")
    plain = HFReference(snapshot)
    processor = plain.processor
    written = f"{processor.vision_start_token}{processor.image_token}{processor.vision_end_token}"
    laid_out = HFReference(
        snapshot, chat_layouts={"image": written, "video": "<not-a-layout>"}
    )
    assert plain.placeholders()["image"] == processor.image_token
    assert laid_out.placeholders()["image"] == written
    # A layout without the placeholder HF expands is not followed.
    assert laid_out.placeholders()["video"] == plain.placeholders()["video"]
    # HF expands only the middle token: the wrappers stay in its ids around the item.
    ids = laid_out.single(laid_out.reference_items("image")[0]).input_ids
    start = processor.tokenizer.convert_tokens_to_ids(processor.vision_start_token)
    assert ids[ids.index(laid_out.embed_id) - 1] == start


@pytest.mark.slow
def test_a_port_replaces_the_wrapper_hf_takes_in_with_the_placeholder(tmp_path) -> None:
    # Cosmos 3 Edge replaces <|vision_start|><|video_pad|><|vision_end|> as one run (or a bare
    # <|video_pad|>). With a chat template that writes the run, a port replacing only the bare
    # token keeps the prompt's pair too; the generated port tries the run first.
    import shutil

    from conftest import mutated_port, scaffold_port, verify_report

    snapshot = tmp_path / "snap"
    shutil.copytree(resolve("cosmos3_edge").path, snapshot)
    (snapshot / "chat_template.jinja").write_text(QWEN_STYLE_TEMPLATE)
    port = scaffold_port(str(snapshot), tmp_path / "port")
    code, report = verify_report(str(snapshot), port, probes=4, settings_per_modality=0)
    assert code == 0, report
    assert any("video" in m for m in report["probe_modalities"].values())
    source = port.read_text()
    start = source.index("            # HF replaces the placeholder together with")
    end = source.index(
        "            PromptReplacement(",
        source.index("replacement=get_video_replacement", start),
    )
    (tmp_path / "wrong").mkdir()
    wrong = mutated_port(
        port.parent,
        port.name.removesuffix("_processing.py"),
        source[start:end],
        "",
        tmp_path / "wrong",
    )
    code, report = verify_report(
        str(snapshot), wrong, probes=4, settings_per_modality=0
    )
    assert code == 1 and report["checks"]["tokens"]["failures"], report["checks"][
        "tokens"
    ]
