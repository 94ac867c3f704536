"""Checkpoints whose code has a model and a tokenizer but no processor class (InternVL2 chat).

Built from the published files of InternVL2-1B (Qwen2) and InternVL2-2B
(InternLM2), tests/data/published (PROVENANCE.md says from where). Without
--trust-remote-code nothing runs: inspect reads statically the prompt the
model's chat() builds and the tiling its config sets; scaffold and verify
refuse in one line. With it, the generated port (it ships the custom HF
processor) passes verify against the model's own chat(), in the bundled
runtime and in real vLLM. The tiling's equivalence with transformers'
GotOcr2 image processor, which the port reuses, is proven against the model
card's own dynamic_preprocess.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import invoke
from PIL import Image
from published_snapshots import (
    CHECKPOINTS,
    PUBLISHED,
    card_functions,
    published_snapshot,
)

from mmport.analyzers.chatprompt import read_chat_prompt, read_chat_tiling

# Image sides from a pixel to far past the largest canvas, so that the grid
# meets every aspect ratio the tiling can pick and the extreme ones.
SIDES = (1, 7, 32, 100, 224, 333, 448, 500, 640, 896, 1000, 1344, 2000, 3000)


def _ran(sentinel: Path) -> list[str]:
    return sentinel.read_text().split() if sentinel.exists() else []


@pytest.fixture(scope="module", params=CHECKPOINTS)
def checkpoint(request, tmp_path_factory) -> tuple[str, Path, Path]:
    """A published checkpoint's snapshot and its sentinel (nothing has run yet)."""
    root = tmp_path_factory.mktemp(request.param)
    sentinel = root / "ran.txt"
    return (
        request.param,
        published_snapshot(request.param, root / "snapshot", sentinel),
        sentinel,
    )


def _config(name: str) -> dict:
    return json.loads((PUBLISHED / name / "config.json").read_text())


def _added_tokens(name: str) -> set[str]:
    return set(json.loads((PUBLISHED / name / "added_tokens.json").read_text()))


def test_the_prompt_rule_is_read_from_chat(checkpoint):
    name, snapshot, sentinel = checkpoint
    rule = read_chat_prompt(snapshot)
    assert rule is not None and rule.method == "chat"
    # Every text the rule writes is a token the checkpoint's tokenizer adds.
    assert {s.text for s in rule.segments} <= _added_tokens(name)
    repeated = [s for s in rule.segments if s.times]
    assert len(repeated) == 1 and rule.item_factor in repeated[0].times
    # The count per tile, evaluated on config.json, is the vision tower's grid after pixel shuffle.
    config = _config(name)
    vision = config["vision_config"]
    side = (config["force_image_size"] or vision["image_size"]) // vision["patch_size"]
    (factor,) = rule.factors
    assert factor.code == "self.num_image_token"
    assert factor.value == int(side**2 * config["downsample_ratio"] ** 2)
    source = factor.source
    line = (snapshot / source.file).read_text().splitlines()[source.line - 1]
    assert "self.num_image_token =" in line
    assert _ran(sentinel) == []


def test_without_the_flag_inspect_reads_chat_statically(checkpoint):
    _, snapshot, sentinel = checkpoint
    result = invoke("inspect", str(snapshot), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["static"] is True
    facts = {f["fact"]: f for f in report["facts"]}
    assert facts["config.json model_type"]["value"] == '"internvl_chat"'
    assert facts["processor"]["value"].startswith("none")
    built = facts["prompt built by"]
    assert built["value"].startswith("InternVLChatModel.chat(): '<image>'")
    line = (snapshot / built["source"]["file"]).read_text().splitlines()
    assert "image_tokens =" in line[built["source"]["line"] - 1]
    for key in ("min_dynamic_patch", "max_dynamic_patch", "use_thumbnail"):
        assert f"config.json {key}" in facts
    assert report["unsettled"]
    assert _ran(sentinel) == []


def test_without_the_flag_scaffold_and_verify_refuse_in_one_line(
    checkpoint, scaffolded, tmp_path
):
    _, snapshot, sentinel = checkpoint
    out = tmp_path / "out"
    # A real port, so that verify gets as far as the snapshot.
    port = scaffolded("llava") / "llava_processing.py"
    for args in (
        ("scaffold", str(snapshot), "-o", str(out)),
        ("verify", str(snapshot), "--port", str(port)),
    ):
        result = invoke(*args)
        said = result.stderr.strip()
        assert result.returncode == 2, result.stdout + said
        assert len(said.splitlines()) == 1 and "Traceback" not in said
        assert "--trust-remote-code" in said and "no processor class" in said
    assert not out.exists()
    assert _ran(sentinel) == []


def test_a_tiling_the_port_cannot_follow_is_refused_in_one_line(tmp_path):
    snapshot = published_snapshot(
        "internvl2_1b", tmp_path / "snapshot", tmp_path / "ran.txt"
    )
    config = json.loads((snapshot / "config.json").read_text())
    config["use_thumbnail"] = False
    (snapshot / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    result = invoke("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code")
    said = result.stderr.strip()
    assert result.returncode == 2, result.stdout + said
    assert len(said.splitlines()) == 1 and "use_thumbnail false" in said
    assert not out.exists()


def test_a_model_whose_prompt_code_mmport_cannot_read_is_refused_in_one_line(
    tmp_path,
):
    snapshot = _snapshot_of(tmp_path / "snapshot", INVALID_NO_REPLACEMENT)
    out = tmp_path / "out"
    result = invoke("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code")
    said = result.stderr.strip()
    assert result.returncode == 2, result.stdout + said
    assert len(said.splitlines()) == 1 and "no processor class" in said
    assert not out.exists()


def _scaffolded(snapshot: Path, out: Path) -> Path:
    result = invoke("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code")
    assert result.returncode == 0, result.stderr
    (port,) = out.glob("*_processing.py")
    return port


def _failures(report: dict) -> str:
    return json.dumps(
        {n: c["failures"][:2] for n, c in report["checks"].items() if c["failures"]},
        indent=1,
    )


@pytest.mark.slow
def test_with_the_flag_a_zero_edit_port_passes(checkpoint, tmp_path):
    from conftest import verify_report

    _, snapshot, sentinel = checkpoint
    port = _scaffolded(snapshot, tmp_path / "port")
    assert "transformers_modules" not in port.read_text()
    code, report = verify_report(
        str(snapshot), port, probes=4, backend="bundled", trust_remote_code=True
    )
    assert code == 0, _failures(report)
    # The reference is the model's own chat(): the snapshot's code ran.
    assert "modeling_internvl_chat" in " ".join(_ran(sentinel))


@pytest.mark.slow
def test_a_port_one_context_token_off_fails(checkpoint, tmp_path):
    from conftest import failed_checks, verify_report

    _, snapshot, _ = checkpoint
    port = _scaffolded(snapshot, tmp_path / "port")
    text = port.read_text()
    rule = "self.num_image_token * num_patches"
    assert rule in text
    port.write_text(text.replace(rule, f"({rule} + 1)"))
    code, report = verify_report(
        str(snapshot), port, probes=4, backend="bundled", trust_remote_code=True
    )
    assert code == 1
    assert {"tokens", "placeholders"} <= failed_checks(report), _failures(report)


def _without_method(port: Path, name: str) -> None:
    """Drop method ``name`` from the generated module (the next method starts where it ends)."""
    text = port.read_text()
    start = text.index(f"    def {name}(")
    end = text.index("    def ", start + 1)
    port.write_text(text[:start] + text[end:])


@pytest.mark.slow
def test_a_port_left_to_vllms_text_fallback_fails_with_internlm2(tmp_path):
    from conftest import failed_checks, verify_report

    # InternLM2's sentencepiece ids change when text is decoded and encoded again,
    # so a placeholder vLLM finds only in text (its fallback) gives other ids than chat().
    snapshot = published_snapshot(
        "internvl2_2b", tmp_path / "snapshot", tmp_path / "ran.txt"
    )
    port = _scaffolded(snapshot, tmp_path / "port")
    _without_method(port, "_postprocess_prompt")
    code, report = verify_report(
        str(snapshot), port, probes=4, backend="bundled", trust_remote_code=True
    )
    assert code == 1
    assert "tokens" in failed_checks(report), _failures(report)


@pytest.mark.vllm
def test_the_port_gives_the_reference_ids_inside_real_vllm(checkpoint, tmp_path):
    from conftest import verify_report

    _, snapshot, _ = checkpoint
    port = _scaffolded(snapshot, tmp_path / "port")
    code, report = verify_report(
        str(snapshot), port, probes=4, backend="vllm", trust_remote_code=True
    )
    assert report["backend"].startswith("vllm")
    assert code == 0, _failures(report)


def test_with_the_flag_inspect_still_reads_statically(checkpoint):
    _, snapshot, sentinel = checkpoint
    sentinel.unlink(missing_ok=True)  # other tests run the code with the flag
    result = invoke("inspect", str(snapshot), "--json", "--trust-remote-code")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["static"] is True
    assert _ran(sentinel) == []


def _tilings(name: str) -> list[tuple[int, int]]:
    """(min, max) tile counts: the checkpoint's own, and two others the config allows."""
    config = _config(name)
    own = (config["min_dynamic_patch"], config["max_dynamic_patch"])
    return [own, (1, 6), (2, 9)]


def _card_tiles(name: str):
    card = card_functions(
        PUBLISHED / "internvl2_1b" / "README.md",
        ("find_closest_aspect_ratio", "dynamic_preprocess"),
    )["dynamic_preprocess"]
    config = _config(name)

    def tiles(width: int, height: int, low: int, high: int) -> int:
        images = card(
            Image.new("RGB", (width, height)),
            min_num=low,
            max_num=high,
            image_size=config["force_image_size"],
            use_thumbnail=config["use_thumbnail"],
        )
        return len(images)

    return tiles


def _got_ocr2(name: str, low: int, high: int):
    from transformers import GotOcr2ImageProcessor

    size = _config(name)["force_image_size"]
    return GotOcr2ImageProcessor(
        crop_to_patches=True,
        min_patches=low,
        max_patches=high,
        size={"height": size, "width": size},
    )


def _tile_mismatches(name: str, sides: tuple[int, ...]) -> list[tuple]:
    tiles = _card_tiles(name)
    mismatches = []
    for low, high in _tilings(name):
        processor = _got_ocr2(name, low, high)
        for width in sides:
            for height in sides:
                card = tiles(width, height, low, high)
                got = processor.get_number_of_image_patches(height, width, {})
                if card != got:
                    mismatches.append((low, high, width, height, card, got))
    return mismatches


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_got_ocr2_tiles_as_the_model_card_on_a_few_sizes(name):
    assert _tile_mismatches(name, (1, 100, 448, 1000, 3000)) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_got_ocr2_tiles_as_the_model_card_on_every_size(name):
    assert _tile_mismatches(name, SIDES) == []


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_got_ocr2_returns_the_tiles_it_counts(name):
    tiles = _card_tiles(name)
    low, high = _tilings(name)[0]
    processor = _got_ocr2(name, low, high)
    for width, height in ((64, 64), (900, 300), (333, 1400)):
        out = processor(images=[Image.new("RGB", (width, height))], return_tensors="pt")
        assert out["pixel_values"].shape[0] == tiles(width, height, low, high)
        assert out["num_patches"].tolist() == [tiles(width, height, low, high)]


def test_the_tiling_settings_and_the_card_code_are_read_with_their_lines():
    snapshot = PUBLISHED / "internvl2_1b"
    tiling = read_chat_tiling(snapshot)
    config = _config("internvl2_1b")
    assert tiling.get("max_dynamic_patch") == config["max_dynamic_patch"]
    for key, _, source in tiling.settings:
        assert f'"{key}"' in source.code
    assert tiling.code is not None and tiling.code.file == "README.md"
    assert tiling.code.code.startswith("def dynamic_preprocess(")


# Analyzer examples (source snippet → the rule read from it, or none).
VALID_CHAT = """
    class Model:
        def __init__(self, config):
            side = config.force_image_size // config.patch_size
            self.per_tile = int(side ** 2 * config.ratio ** 2)

        def chat(self, tokenizer, question, tiles, START='<s_img>', PAD='<pad_img>'):
            for n in tiles:
                item = START + PAD * self.per_tile * n + '</s_img>'
                question = question.replace('<picture>', item, 1)
            return tokenizer(question)
"""

INVALID_NO_REPLACEMENT = """
    class Model:
        def chat(self, tokenizer, question, START='<s_img>'):
            return tokenizer(START + question)
"""


def _snapshot_of(tmp_path: Path, source: str, extra_auto: dict | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "modeling_x.py").write_text(textwrap.dedent(source))
    auto_map = {"AutoModel": "modeling_x.Model", **(extra_auto or {})}
    config = {
        "model_type": "x_chat",
        "auto_map": auto_map,
        "force_image_size": 64,
        "patch_size": 8,
        "ratio": 0.5,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_valid_chat_example(tmp_path):
    rule = read_chat_prompt(_snapshot_of(tmp_path, VALID_CHAT))
    assert rule is not None
    assert rule.placeholder == "<picture>"
    assert [s.text for s in rule.segments] == ["<s_img>", "<pad_img>", "</s_img>"]
    assert rule.item_factor == "n"
    factor = rule.factors[0]
    assert (factor.code, factor.rule, factor.value) == (
        "self.per_tile",
        "int(side ** 2 * config.ratio ** 2)",
        int((64 // 8) ** 2 * 0.5**2),
    )
    assert factor.statements == (
        "side = config.force_image_size // config.patch_size",
        "self.per_tile = int(side ** 2 * config.ratio ** 2)",
    )


def test_invalid_examples_give_no_rule(tmp_path):
    assert (
        read_chat_prompt(_snapshot_of(tmp_path / "a", INVALID_NO_REPLACEMENT)) is None
    )
    # A checkpoint with a processor class of its own is not of this kind, whatever its model does.
    with_processor = _snapshot_of(
        tmp_path / "b", VALID_CHAT, {"AutoProcessor": "processing_x.Proc"}
    )
    assert read_chat_prompt(with_processor) is None
