"""Three verdicts (pass, fail, cannot judge) and the severity of every failure.

The classifier is fed real exceptions: real transformers configs, the real
tokenizer of a synthetic snapshot, lookups written as ports write them.
"""

from __future__ import annotations

import doctest
import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from conftest import invoke, verify_report
from transformers import LlavaConfig

import mmport.verify.lacking
from mmport.errors import verdict_exit_code, worst_exit_code
from mmport.verify.lacking import SnapshotFacts, snapshot_lacks
from mmport.verify.report import CannotJudge, CheckResult, Failure, Lacking, Report

LACKING_PORT = Path(__file__).parent / "ports" / "llava_lacking_vocab.py"
PATTERN_PORT = Path(__file__).parent / "ports" / "llava_pattern_by_text.py"
# A text real checkpoints hold as one token and a byte-level synthetic vocabulary does not.
ABSENT = "<0x0A>"


@pytest.fixture(scope="module")
def tokenizer():
    """The real tokenizer of LLaVA's synthetic snapshot."""
    from mmport.sources import resolve

    return resolve("llava").load_processor().tokenizer


@pytest.fixture(scope="module")
def facts(tokenizer) -> SnapshotFacts:
    """The snapshot's facts, its config a LLaVA config whose vision sub-config was left out."""
    config = LlavaConfig()
    config.vision_config = None
    return SnapshotFacts.of(tokenizer, config)


def _raised(action) -> BaseException:
    """The exception ``action()`` raises (it must raise)."""
    try:
        action()
    except Exception as exc:
        return exc
    raise AssertionError("expected the action to raise")


def test_doctests_of_the_classifier() -> None:
    assert doctest.testmod(mmport.verify.lacking).failed == 0


def test_vocabulary_local_looked_up_by_a_text_it_lacks(tokenizer, facts) -> None:
    assert ABSENT not in tokenizer.get_vocab()

    def port():
        vocab = tokenizer.get_vocab()
        return vocab[ABSENT]

    assert snapshot_lacks(_raised(port), facts) == Lacking("vocabulary", ABSENT)


def test_get_vocab_call_subscripted_with_a_text_it_lacks(tokenizer, facts) -> None:
    exc = _raised(lambda: tokenizer.get_vocab()[ABSENT])
    assert snapshot_lacks(exc, facts) == Lacking("vocabulary", ABSENT)


def test_other_mappings_missing_a_key_are_no_lacking_vocabulary(
    tokenizer, facts
) -> None:
    outputs = {"pixel_values": 1}
    # A key HF's outputs lack is the port's bug, whatever the vocabulary holds.
    assert snapshot_lacks(_raised(lambda: outputs["image_sizes"]), facts) is None
    vocab = tokenizer.get_vocab()
    known = next(iter(vocab))
    edited = {k: v for k, v in vocab.items() if k != known}
    assert snapshot_lacks(_raised(lambda: edited[ABSENT]), facts) is None


def test_config_attribute_the_snapshot_does_not_set(facts) -> None:
    config = LlavaConfig()
    exc = _raised(lambda: config.boi_token_index)
    assert snapshot_lacks(exc, facts) == Lacking(
        "config", "LlavaConfig.boi_token_index"
    )


def test_sub_config_left_none(facts) -> None:
    config = facts.config

    def port_reads_a_local():
        hf_config = config
        return hf_config.vision_config.patch_size

    def port_calls_for_it():
        return _config_of(facts).vision_config.patch_size

    for port in (port_reads_a_local, port_calls_for_it):
        assert snapshot_lacks(_raised(port), facts) == Lacking(
            "config", "LlavaConfig.vision_config"
        ), port


def _config_of(facts: SnapshotFacts):
    """As a port's ``self.get_hf_config()``: the config comes from a call the classifier does not repeat."""
    return facts.config


def test_none_and_attributes_of_other_objects_are_no_lacking_config(facts) -> None:
    settings: dict = {}
    exc = _raised(lambda: settings.get("vision").patch_size)
    assert snapshot_lacks(exc, facts) is None
    assert snapshot_lacks(_raised(lambda: object().patch_size), facts) is None


def test_a_config_attribute_left_none_handed_to_the_raising_call(facts) -> None:
    # Granite 4 Vision's ports take Fraction(config.downsample_rate); checkpoints set "4/8".
    from fractions import Fraction

    config = LlavaConfig()
    config.downsample_rate = None
    lacking = snapshot_lacks(_raised(lambda: Fraction(config.downsample_rate)), facts)
    assert lacking == Lacking("config", "LlavaConfig.downsample_rate")
    config.downsample_rate = (
        "4/x"  # set, and wrong: the port's or the checkpoint's fault
    )
    assert (
        snapshot_lacks(_raised(lambda: Fraction(config.downsample_rate)), facts) is None
    )
    assert snapshot_lacks(_raised(lambda: Fraction(None)), facts) is None


def test_text_named_to_convert_tokens_to_ids_that_the_vocabulary_lacks(
    tokenizer, facts
) -> None:
    def port():
        image_id = tokenizer.convert_tokens_to_ids("<start_of_image>")
        if image_id is None or image_id == tokenizer.unk_token_id:
            raise ValueError("the image token is unknown to the tokenizer")
        return image_id

    assert snapshot_lacks(_raised(port), facts) == Lacking(
        "vocabulary", "<start_of_image>"
    )


def test_a_wrapped_error_is_read_through_its_cause(tokenizer, facts) -> None:
    def port():
        try:
            tokenizer.get_vocab()[ABSENT]
        except KeyError as exc:
            raise RuntimeError("prompt updates failed") from exc

    assert snapshot_lacks(_raised(port), facts) == Lacking("vocabulary", ABSENT)


def test_plain_errors_are_no_lacking(facts) -> None:
    assert snapshot_lacks(_raised(lambda: 1 // 0), facts) is None
    assert snapshot_lacks(_raised(lambda: [][1]), facts) is None


def _report(*checks: CheckResult) -> Report:
    return Report("llava", "port.py", "bundled", 1, 0, {c.name: c for c in checks})


UNJUDGED = CannotJudge(
    "probe0", Lacking("vocabulary", ABSENT), "port", f"KeyError: {ABSENT!r}"
)


def _vision_enabled(config) -> bool:
    # A port switching a modality on by a config attribute the defaults leave unset.
    return getattr(config.vision_config, "decoder_dmodel", None) is not None


def test_a_config_attribute_a_port_asks_for_by_name_and_finds_unset() -> None:
    from mmport.verify.lacking import unset_config_reads

    config = LlavaConfig()
    assert [
        lacking.name for lacking in unset_config_reads(lambda: _vision_enabled(config))
    ] == ["CLIPVisionConfig.decoder_dmodel"]
    config.vision_config.decoder_dmodel = 64  # set, as a checkpoint's config would
    assert unset_config_reads(lambda: _vision_enabled(config)) == []
    # A name asked of something that is not a config says nothing of the snapshot.
    assert unset_config_reads(lambda: getattr(object(), "decoder_dmodel", None)) == []


def test_verdict_fail_outranks_cannot_judge_outranks_pass() -> None:
    passing = CheckResult("limits", runs=1)
    unjudged = CheckResult("tokens", runs=1, unjudged=[UNJUDGED])
    failed = CheckResult(
        "dummy",
        runs=1,
        failures=[Failure("dummy", "wrong", loudness="loud")],
        unjudged=[UNJUDGED],
    )
    assert unjudged.status == "cannot_judge" and failed.status == "fail"
    assert _report(passing).verdict == "pass"
    assert (
        _report(passing, unjudged).verdict == "cannot_judge"
        and not _report(passing, unjudged).passed
    )
    assert _report(passing, unjudged, failed).verdict == "fail"
    assert [verdict_exit_code(v) for v in ("pass", "fail", "cannot_judge")] == [0, 1, 4]


def test_worst_exit_code_orders_cannot_judge_below_a_failed_check() -> None:
    assert worst_exit_code([0, 4]) == 4
    assert worst_exit_code([4, 1, 0]) == 1
    assert worst_exit_code([1, 2, 4]) == 2 and worst_exit_code([3, 2, 4]) == 3
    assert worst_exit_code([]) == 0


def test_failure_severity_is_typed_and_in_every_form() -> None:
    failure = Failure(
        "probe1 [max_pixels=3136]",
        "token ids differ",
        5,
        "1",
        "2",
        loudness="silent",
        setting="max_pixels=3136",
    )
    assert (
        failure.occurs == "setting"
        and Failure("p", "m", loudness="loud").occurs == "defaults"
    )
    assert failure.describe().endswith("(silent, only under max_pixels=3136)")
    report = _report(CheckResult("tokens", runs=1, failures=[failure]))
    said = json.loads(report.to_json())["checks"]["tokens"]["failures"][0]
    assert (said["loudness"], said["setting"], said["occurs"]) == (
        "silent",
        "max_pixels=3136",
        "setting",
    )
    message = ET.fromstring(report.to_junit()).find("testcase/failure").get("message")
    assert "silent, only under max_pixels=3136" in message


def test_failed_modalities_are_read_off_probes_and_named_modalities_not_messages() -> (
    None
):
    # A probe with items names its modalities; a failure of no such probe names its own, or stands for every one.
    items = Failure("probe1", "token ids differ", loudness="silent")
    dummy = Failure(
        "dummy", "the port's dummy inputs fail", loudness="loud", modalities=("video",)
    )
    gate = Failure("probes", "only 1 of 8 image probes compared", loudness="unknown")

    def failed(*failures: Failure) -> set[str]:
        report = _report(CheckResult("tokens", runs=1, failures=list(failures)))
        report.probe_modalities = {"probe1": ["image"], "probe2": ["audio"]}
        return report.failed_modalities()

    assert failed(items) == {"image"}
    assert failed(dummy) == {"video"}
    assert failed(gate) == {"image", "audio"}, (
        "a message naming a modality decides nothing"
    )


def test_port_looking_up_a_text_the_snapshot_lacks_cannot_be_judged(tmp_path) -> None:
    code, report = verify_report("llava", LACKING_PORT, probes=3)
    assert (
        code == 4 and report["verdict"] == "cannot_judge" and report["passed"] is False
    ), report["checks"]
    tokens = report["checks"]["tokens"]
    assert tokens["status"] == "cannot_judge" and not tokens["failures"], tokens
    reason = tokens["cannot_judge"][0]
    assert (
        reason["lacking"] == {"kind": "vocabulary", "name": ABSENT}
        and reason["side"] == "port"
    ), reason
    assert not any(c["failures"] for c in report["checks"].values()), report["checks"]


def test_a_port_targeting_a_token_text_an_invented_tokenizer_lacks_cannot_be_judged(
    tmp_path,
) -> None:
    """On mmport's synthetic tokenizer the port's fixed placeholder text is not a token: cannot judge;
    the same files as a user's own snapshot are a checkpoint's tokenizer, and the port fails there."""
    from mmport.sources import resolve

    code, report = verify_report("llava", PATTERN_PORT, probes=3)
    tokens = report["checks"]["tokens"]
    assert code == 4 and tokens["status"] == "cannot_judge", tokens
    unheld = {"kind": "vocabulary", "name": "<|image_pad|>"}
    assert tokens["cannot_judge"][0]["lacking"] == unheld, tokens
    dummy = report["checks"]["dummy"]
    assert dummy["status"] == "cannot_judge", dummy
    assert dummy["cannot_judge"][0]["lacking"] == unheld, dummy
    local = tmp_path / "llava"
    shutil.copytree(resolve("llava").path, local)
    code, report = verify_report(str(local), PATTERN_PORT, probes=3)
    tokens, dummy = report["checks"]["tokens"], report["checks"]["dummy"]
    assert code == 1 and tokens["status"] == "fail", tokens
    assert "Failed to apply prompt replacement" in tokens["failures"][0]["message"]
    assert dummy["status"] == "fail", dummy


def test_cli_exits_4_and_junit_skips_what_it_cannot_judge(tmp_path) -> None:
    junit, page = tmp_path / "junit.xml", tmp_path / "report.html"
    done = invoke(
        "verify",
        "llava",
        "--port",
        str(LACKING_PORT),
        "--probes",
        "2",
        "--settings",
        "0",
        "--junit",
        str(junit),
        "--html",
        str(page),
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "CANNOT JUDGE" in done.stdout and "cannot judge" in done.stdout
    suite = ET.fromstring(junit.read_text())
    assert (
        suite.find("properties/property[@name='verdict']").get("value")
        == "cannot_judge"
    )
    case = suite.find("testcase[@name='tokens']")
    assert (
        case.find("skipped")
        .get("message")
        .startswith("cannot judge: the snapshot lacks the vocabulary entry")
    )
    assert (
        case.find("properties/property[@name='verdict']").get("value") == "cannot_judge"
    )
    assert case.find("failure") is None and int(suite.get("failures")) == 0
    html = page.read_text()
    assert (
        'class="verdict cannot_judge">CANNOT JUDGE' in html
        and "<h2>Cannot judge</h2>" in html
    )
