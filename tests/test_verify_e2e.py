"""scaffold + verify end to end, on synthetic and real-geometry snapshots,
and verify's verdict on wrong ports made by editing a correct one."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from conftest import failed_checks, invoke, mutated_port, scaffold_port, verify_report
from snapshots import (
    colpali_bos_snapshot,
    gemma3_seq64_snapshot,
    idefics3_small_tiles_snapshot,
    llava15_snapshot,
    llava_next_pinpoints_snapshot,
    paligemma448_snapshot,
    qwen2_vl_pixels_snapshot,
)

slow = pytest.mark.slow

HANDWRITTEN = Path(__file__).parent / "ports" / "llava_handwritten.py"


def _verify(ref: str, port: Path, tmp_path: Path) -> tuple[int, dict]:
    return verify_report(ref, port, probes=6)


def _inspect(ref: str) -> dict:
    """The image modality of ``mmport inspect REF --json``."""
    from mmport.analyzers import analyze
    from mmport.sources import resolve
    from mmport.spec import to_json

    return json.loads(to_json(analyze(resolve(ref))))["modalities"][0]


# The fast lane's representatives: a fixed count (LLaVA), an insertion at the
# prompt's start (PaliGemma), a count that follows the image size (Qwen2-VL).
@pytest.mark.parametrize("model_type", ["llava", "paligemma", "qwen2_vl"])
def test_scaffold_then_verify_passes(model_type, scaffolded, tmp_path) -> None:
    out = scaffolded(model_type)
    code, report = _verify(model_type, out / f"{model_type}_processing.py", tmp_path)
    assert code == 0, report
    # Every processing check passes; the model check needs --model (tests/test_model_check.py),
    # the serve check --serve (tests/test_serve.py).
    assert all(
        c["status"] == "pass"
        for name, c in report["checks"].items()
        if name not in ("model", "serve")
    ), report
    assert (
        report["checks"]["model"]["status"] == "skip"
        and report["checks"]["serve"]["status"] == "skip"
    )


@slow
@pytest.mark.parametrize("build", [llava15_snapshot, paligemma448_snapshot])
def test_port_follows_local_snapshot_geometry(build, tmp_path) -> None:
    snapshot = build(tmp_path / "snap")
    port = scaffold_port(str(snapshot), tmp_path / "port")
    code, report = _verify(str(snapshot), port, tmp_path)
    assert code == 0, report


def _derived_port_passes(snapshot: Path, tmp_path: Path) -> dict:
    """inspect (the count is derived), scaffold and verify a snapshot; the count facts."""
    count = _inspect(str(snapshot))["count"]
    assert count["strategy"] == "derived", count
    code, report = _verify(
        str(snapshot), scaffold_port(str(snapshot), tmp_path / "port"), tmp_path
    )
    assert code == 0, report
    return count


@slow
@pytest.mark.parametrize(
    "build", [llava_next_pinpoints_snapshot, qwen2_vl_pixels_snapshot]
)
def test_derived_size_dependent_count_follows_snapshot(build, tmp_path) -> None:
    # The count depends on the image size (pinpoints, pixel budget); the port
    # derives it from HF's code and reads the snapshot's settings at run time.
    count = _derived_port_passes(build(tmp_path / "snap"), tmp_path)
    assert count["size_dependent"], count


@slow
@pytest.mark.parametrize(
    "build", [gemma3_seq64_snapshot, idefics3_small_tiles_snapshot]
)
def test_derived_replacement_follows_snapshot(build, tmp_path) -> None:
    # The replacement is more than `token * n` (begin/end-of-image tokens, tile
    # markers); the port carries HF's hook over and tokenizes what it returns,
    # reading the snapshot's settings (tokens per image, tile size) at run time.
    count = _derived_port_passes(build(tmp_path / "snap"), tmp_path)
    assert count["replacement"], count


def test_handwritten_port_passes_and_names_the_settings_its_model_cannot_take() -> None:
    # Written as vLLM's own LLaVA port is: every image counted at the vision tower's size,
    # whatever the request's processor kwargs say. The settings that change HF's counts
    # make HF's processor hand CLIP pixels it refuses, so no engine serves them.
    from rich.console import Console

    from mmport.console import report_table
    from mmport.verify import verify_port
    from mmport.verify.html import render_html

    verified = verify_port("llava", HANDWRITTEN, probes=6, settings_per_modality=1)
    report = json.loads(verified.to_json())
    assert verified.passed, verified.failure_summary()
    dropped = report["settings_not_applicable"]
    assert dropped and all(
        f["reason"] and f["kwargs"] in f["reason"] for f in dropped
    ), report
    assert not {f["kwargs"] for f in dropped} & {
        s["kwargs"] for s in report["settings"]
    }
    assert not any(
        f["kwargs"] in probe for f in dropped for probe in report["probe_cases"]
    ), "its probes must not run"
    console = Console(record=True, width=200)
    console.print(report_table(verified))
    said = " ".join(console.export_text().split())
    assert "not applicable to this checkpoint" in said and all(
        f["kwargs"] in said for f in dropped
    ), said
    page = render_html(verified)
    assert "not applicable to this checkpoint" in page and all(
        html.escape(f["reason"]) in page for f in dropped
    )


def test_a_pinned_setting_its_model_cannot_take_is_bad_input(tmp_path) -> None:
    # The user pins what verify would drop: nothing they asked for can be judged, so it is
    # their input that is wrong (exit 2, one line naming the setting and the reason).
    from mmport.sources import resolve
    from mmport.verify.fit import FitJudge
    from mmport.verify.reference import HFReference
    from mmport.verify.settings import count_changing_settings

    hf = HFReference(resolve("llava"))
    judge = FitJudge(hf)
    refused = [
        s
        for s in count_changing_settings(hf, per_modality=99)
        if not judge.applicable(s)
    ]
    assert refused, "no setting the model refuses here, so this test could not fail"
    result = invoke(
        "verify",
        "llava",
        "--port",
        str(HANDWRITTEN),
        "--probes",
        "2",
        "--processor-kwargs",
        json.dumps(refused[0].kwargs),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert (
        "not applicable to this checkpoint" in said
        and refused[0].describe() in said
        and "Traceback" not in said
    ), said


@slow
def test_port_ignoring_drawn_settings_its_model_takes_fails(
    scaffolded, tmp_path
) -> None:
    # Qwen2-VL's model takes its pixel budgets (a tiny twin runs on HF's outputs under
    # them), so a port counting every item under the defaults is judged, and fails.
    wrong = mutated_port(
        scaffolded("qwen2_vl"),
        "qwen2_vl",
        "get_image_item_tokens( item_idx, mm_items, hf_processor_mm_kwargs )",
        "get_image_item_tokens(item_idx, mm_items)",
        tmp_path,
    )
    code, report = _verify("qwen2_vl", wrong, tmp_path)
    drawn = [s["kwargs"] for s in report["settings"]]
    assert code == 1 and drawn and not report["settings_not_applicable"], report
    failing = {f["probe"] for f in report["checks"]["tokens"]["failures"]}
    assert failing and all(
        any(f"[{kwargs}]" in probe for kwargs in drawn) for probe in failing
    ), failing
    # Each failure says it happens only under a request setting, and how vLLM would show it.
    failures = [f for check in report["checks"].values() for f in check["failures"]]
    assert all(f["occurs"] == "setting" and f["setting"] in drawn for f in failures), (
        failures
    )
    assert all(f["loudness"] in ("loud", "silent") for f in failures), failures


# (model_type, old text, new text, the check that must fail)
MUTATIONS = [
    (
        "llava",
        "        return num_image_tokens\n",
        "        return num_image_tokens + 1\n",
        "tokens",
    ),
    ("llava", "target=[image_token_id]", "target=[image_token_id + 1]", "tokens"),
    (
        "llava",
        'MultiModalFieldConfig.batched("image")',
        'MultiModalFieldConfig.shared("image", 2)',
        "fields",
    ),
    # Dummy text with one placeholder fewer than the dummy images.
    (
        "llava",
        'num_images = mm_counts.get("image", 0)',
        'num_images = max(mm_counts.get("image", 0) - 1, 0)',
        "dummy",
    ),
    # An item given as embeddings placed with one position too many.
    (
        "llava",
        "    def get_image_token_id(self) -> int:",
        "    def get_embedding_tokens(self, *args, **kwargs) -> list[int]:\n"
        "        tokens = super().get_embedding_tokens(*args, **kwargs)\n"
        "        return [*tokens, self.get_image_token_id()]\n\n"
        "    def get_image_token_id(self) -> int:",
        "embeds",
    ),
    ("paligemma", "PromptIndexTargets.start()", "PromptIndexTargets.end()", "tokens"),
    # Size-dependent derived counts: right for square images only, and a
    # worst-case search that never looks past small images.
    (
        "llava_next",
        "image_size = (image_height, image_width)",
        "image_size = (image_width, image_width)",
        "tokens",
    ),
    (
        "qwen2_vl",
        "configured.image_processor, image_height, image_width, {}\n",
        "configured.image_processor, image_width, image_width, {}\n",
        "tokens",
    ),
    # A worst case that never looks past small images, in place of the searched one.
    (
        "qwen2_vl",
        "    def get_image_token_id(self) -> int:",
        "    def get_image_size_with_most_features(self):\n"
        "        from vllm.multimodal.parse import ImageSize\n\n"
        "        return ImageSize(width=224, height=224)\n\n"
        "    def get_image_token_id(self) -> int:",
        "dummy",
    ),
    # Derived replacements: the begin-of-image token marked as an embedding
    # position, and tile rows taken for columns (wrong for non-square images).
    (
        "gemma3",
        "embed_token_id=self.info.get_embed_token_id()",
        "embed_token_id=image_token_id",
        "placeholders",
    ),
    (
        "idefics3",
        "image_width, kwargs\n    )[1]",
        "image_width, kwargs\n    )[2]",
        "tokens",
    ),
    # Sizes and counts recomputed by HF's token API: width and height swapped.
    (
        "pixtral",
        "resized_image_size(configured, image_height, image_width, kwargs)",
        "resized_image_size(configured, image_width, image_height, kwargs)",
        "tokens",
    ),
    (
        "gemma4",
        "image_token_count(configured, image_height, image_width, kwargs)",
        "image_token_count(configured, image_height, image_height, kwargs)",
        "tokens",
    ),
    # A count of local tiles taken for the image processor's whole patch count
    # (which adds the global view): wrong for every image that is tiled.
    (
        "deepseek_ocr2",
        "image_width, {}\n            )\n            - 1",
        "image_width, {}\n            )\n            - 0",
        "tokens",
    ),
    # A processor that writes its own prompt per image: HF answers no request with two.
    ("colqwen2", 'return {"image": 1}', 'return {"image": None}', "limits"),
    # BLIP-2 writes one block of image tokens whatever the number of images.
    ("blip-2", 'return {"image": 1}', 'return {"image": None}', "limits"),
    (
        "colqwen2",
        "configured.image_processor, image_height, image_width, {}\n",
        "configured.image_processor, image_width, image_width, {}\n",
        "tokens",
    ),
]


# One wrong port per representative family runs in the fast lane, so that the
# lane's passing ports are shown to be judged; the rest of the suite is slow.
FAST_MUTATIONS = {0, 4, 5, 8}


@pytest.mark.parametrize(
    ("model_type", "old", "new", "check"),
    [
        pytest.param(*m, marks=() if i in FAST_MUTATIONS else slow)
        for i, m in enumerate(MUTATIONS)
    ],
    ids=[m[3] + "-" + m[0] for m in MUTATIONS],
)
def test_wrong_port_fails_the_right_check(
    model_type, old, new, check, scaffolded, tmp_path
) -> None:
    wrong = mutated_port(scaffolded(model_type), model_type, old, new, tmp_path)
    code, report = _verify(model_type, wrong, tmp_path)
    assert code == 1
    assert check in failed_checks(report), report


@slow
def test_delegated_count_passes_and_is_reported(scaffolded, tmp_path) -> None:
    # Ovis2 lays out each image from its tile grid, an output that neither the
    # image processor nor the processor's token API computes from the size
    # alone, so the port asks the HF processor for each item's replacement.
    count = _inspect("ovis2")["count"]
    assert count["strategy"] == "delegated" and count["reason"], count
    code, report = _verify(
        "ovis2", scaffolded("ovis2") / "ovis2_processing.py", tmp_path
    )
    assert code == 0, report


@slow
def test_items_hf_expands_to_nothing_are_reported_not_compared(
    scaffolded, tmp_path
) -> None:
    # LightOnOCR gives a tiny image zero tokens; vLLM cannot hold an item with no
    # position, so verify names those probes instead of failing every port.
    from mmport.media import make_image
    from mmport.sources import resolve
    from mmport.verify.reference import HFReference

    code, report = _verify(
        "lighton_ocr", scaffolded("lighton_ocr") / "lighton_ocr_processing.py", tmp_path
    )
    assert code == 0, report
    summary = report["checks"]["tokens"]["summary"]
    assert "not compared" in summary and report["checks"]["tokens"]["runs"] > 0
    hf = HFReference(resolve("lighton_ocr"))
    for width, height in {
        tuple(map(int, m.split("×"))) for m in re.findall(r"a (\d+×\d+) image", summary)
    }:
        assert hf.item_count(make_image(width, height, 0)) == 0


@slow
def test_items_hf_counts_differently_in_company_are_reported_not_compared(
    scaffolded, tmp_path
) -> None:
    # LLaVA-OneVision patches an image only when it is alone in its prompt, so
    # HF's count for an item depends on the other items; vLLM processes and
    # caches each item alone. verify names those probes, compares the rest, and
    # still checks that the port's items are independent (cache).
    from mmport.media import make_image
    from mmport.sources import resolve
    from mmport.verify.reference import HFReference

    hf = HFReference(resolve("llava_onevision"))
    images = [make_image(640, 480, 0), make_image(224, 224, 1)]
    together = hf.run(hf.placeholder * 2, images).input_ids.count(hf.embed_id)
    assert together != sum(
        hf.item_count(image) for image in images
    )  # HF's own behaviour, measured
    code, report = _verify(
        "llava_onevision",
        scaffolded("llava_onevision") / "llava_onevision_processing.py",
        tmp_path,
    )
    assert code == 0, report
    checks = report["checks"]
    assert (
        "together" in checks["tokens"]["summary"] and checks["placeholders"]["runs"] > 0
    )
    assert checks["cache"]["runs"] > 0


# Named families, one per mechanism: chameleon (tokens HF's __call__ appends),
# blip-2 (a block __call__ prepends; one image per prompt), instructblip (a
# second tokenizer's ids are text, not item fields), lfm2_vl (extra kwargs of
# _process_images; tiles processed per item), aya_vision (the placeholder is
# not the embedded token), cohere_compass (token texts set by the constructor),
# internvl (get_number_of_image_patches' named count), hunyuan_vl (placeholders
# HF accepts only between wrapper tokens), got_ocr2 (refuses nested image lists),
# video_llava (geometry its constructor sets).
NAMED_FAMILIES = [
    "chameleon",
    "blip-2",
    "instructblip",
    "lfm2_vl",
    "aya_vision",
    "cohere_compass",
    "internvl",
    "hunyuan_vl",
    "got_ocr2",
    "video_llava",
]


@slow
@pytest.mark.parametrize("model_type", NAMED_FAMILIES)
def test_named_family_passes_with_zero_edits(model_type, scaffolded, tmp_path) -> None:
    port = next(scaffolded(model_type).glob("*_processing.py"))
    code, report = _verify(model_type, port, tmp_path)
    assert code == 0, report


@slow
def test_items_padded_together_are_processed_one_by_one(scaffolded, tmp_path) -> None:
    # LLaVA-NeXT pads each image's patches to the batch maximum, so no field
    # layout splits the batch; the port calls HF once per image instead.
    spec = _inspect("llava_next")
    assert spec["fields_strategy"] == "per_item"
    code, report = _verify(
        "llava_next", scaffolded("llava_next") / "llava_next_processing.py", tmp_path
    )
    assert code == 0, report


@slow
@pytest.mark.parametrize("model_type", ["colpali", "colqwen2", "colmodernvbert"])
def test_retrieval_processor_passes_with_zero_edits(
    model_type, scaffolded, tmp_path
) -> None:
    # ColPali and ColQwen2 take text or images, never both, and write the prompt
    # around an image themselves: a request is that prompt and one image, a query
    # the prompt HF writes around its text. ColModernVBert nests the model whose
    # processor family holds its image processor.
    port = next(scaffolded(model_type).glob("*_processing.py"))
    code, report = _verify(model_type, port, tmp_path)
    assert code == 0, report
    assert report["checks"]["placeholders"]["runs"] > 0, report


@slow
def test_tokenizer_bos_switched_off_by_the_processor_stays_off(tmp_path) -> None:
    # The checkpoint's tokenizer adds BOS; ColPali's constructor turns that off and
    # writes "<bos>" into its own prompt, so the port tokenizes without special tokens.
    snapshot = colpali_bos_snapshot(tmp_path / "snap")
    port = scaffold_port(str(snapshot), tmp_path / "port")
    assert "add_special_tokens=False" in port.read_text()
    code, report = _verify(str(snapshot), port, tmp_path)
    assert code == 0, report


def test_a_modality_the_port_declares_unsupported_is_named_not_failed(
    scaffolded, tmp_path
) -> None:
    # vLLM's contract: a limit of 0 says the port does not support the modality, and vLLM
    # refuses such requests loudly. The port is judged on the rest; the report names it.
    limits = 'return {"image": None, "video": None}'
    port = mutated_port(
        scaffolded("qwen2_vl"),
        "qwen2_vl",
        limits,
        'return {"image": None, "video": 0}',
        tmp_path,
    )
    code, report = verify_report("qwen2_vl", port, probes=4, settings_per_modality=0)
    assert code == 0, report
    assert (
        "video not judged: the port declares it unsupported"
        in report["checks"]["tokens"]["summary"]
    ), report["checks"]["tokens"]
    assert not any(
        "video" in described for described in report["probe_cases"].values()
    ), report["probe_cases"]
    # A modality left out of the limits is one vLLM allows "at most 0" of: the same declaration.
    (tmp_path / "omitted").mkdir()
    omitted = mutated_port(
        scaffolded("qwen2_vl"),
        "qwen2_vl",
        limits,
        'return {"image": None}',
        tmp_path / "omitted",
    )
    code, report = verify_report("qwen2_vl", omitted, probes=4, settings_per_modality=0)
    assert code == 0, report
    assert (
        "video not judged: the port declares it unsupported"
        in report["checks"]["tokens"]["summary"]
    ), report["checks"]["tokens"]
    # Every modality unsupported: nothing is compared, and that fails closed.
    (tmp_path / "none").mkdir()
    none = mutated_port(
        scaffolded("qwen2_vl"),
        "qwen2_vl",
        limits,
        'return {"image": 0, "video": 0}',
        tmp_path / "none",
    )
    assert verify_report("qwen2_vl", none, probes=4, settings_per_modality=0)[0] == 1
