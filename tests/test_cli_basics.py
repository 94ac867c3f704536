"""CLI behaviour a user meets first: help, version, and bad input.

Most cases run the CLI in this process (typer's runner); a few run the
installed command in a fresh interpreter, as a user's shell does.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import invoke, run_cli


def test_help_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys\n"
        "from mmport.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "inspect" in out and "scaffold" in out and "verify" in out
    assert "HEAVY []" in out


def _assert_user_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2


def test_unknown_model_type_in_a_real_process(tmp_path) -> None:
    _assert_user_error(run_cli("inspect", "not_a_model_type"), "unknown model_type")


def test_missing_directory(tmp_path) -> None:
    _assert_user_error(
        invoke("inspect", str(tmp_path / "nope") + "/"), "not a directory"
    )


def test_directory_without_config(tmp_path) -> None:
    _assert_user_error(invoke("inspect", str(tmp_path)), "no config.json")


def test_hub_id_offline_and_not_cached(tmp_path) -> None:
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    _assert_user_error(
        run_cli("inspect", "someorg/some-model", env=env), "not in the local cache"
    )


def test_scaffold_without_force_writes_nothing(tmp_path) -> None:
    out = tmp_path / "port"
    assert invoke("scaffold", "llava", "-o", str(out)).returncode == 0
    before = {p.name: p.read_text() for p in out.iterdir()}
    (out / "llava_processing.py").write_text("# edited by hand\n")
    result = invoke("scaffold", "llava", "-o", str(out))
    _assert_user_error(result, "--force")
    assert (out / "llava_processing.py").read_text() == "# edited by hand\n"
    assert sorted(before) == sorted(p.name for p in out.iterdir())


def test_inspect_json_is_a_port_spec() -> None:
    result = invoke("inspect", "llava", "--json")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)
    image = spec["modalities"][0]
    assert image["count"]["source"].startswith("models/llava/processing_llava.py:")
    assert image["update"]["mode"] == "replace"


def test_inspect_says_which_encoder_paths_hf_has_no_method_for() -> None:
    # Qwen2-Audio computes its audio features inside forward; InternVL's videos go
    # through its image path. inspect must not name a method HF lacks.
    audio = invoke("inspect", "qwen2_audio")
    assert audio.returncode == 0, audio.stderr
    assert "Qwen2AudioModel.forward" in " ".join(audio.stdout.split())
    spec = json.loads(invoke("inspect", "internvl", "--json").stdout)
    (video,) = [p for p in spec["encoder"]["paths"] if p["modality"] == "video"]
    assert video["through"] == "image" and video["method"] == "get_image_features"


def test_verify_port_file_missing(tmp_path) -> None:
    _assert_user_error(
        invoke("verify", "llava", "--port", str(tmp_path / "x.py")), "does not exist"
    )


def test_verify_port_that_fails_to_import(tmp_path) -> None:
    bad = tmp_path / "bad_port.py"
    bad.write_text("import definitely_not_a_module\n")
    _assert_user_error(invoke("verify", "llava", "--port", str(bad)), "bad_port.py")


def test_verify_port_without_classes(tmp_path) -> None:
    empty = tmp_path / "empty_port.py"
    empty.write_text("X = 1\n")
    _assert_user_error(
        invoke("verify", "llava", "--port", str(empty)), "BaseProcessingInfo"
    )


def test_verify_report_path_in_missing_directory(tmp_path, scaffolded) -> None:
    port = scaffolded("llava") / "llava_processing.py"
    result = invoke(
        "verify",
        "llava",
        "--port",
        str(port),
        "--junit",
        str(tmp_path / "no" / "r.xml"),
    )
    _assert_user_error(result, "does not exist")


def test_verify_writes_junit_naming_each_check(tmp_path, scaffolded) -> None:
    from xml.etree import ElementTree

    port = scaffolded("llava") / "llava_processing.py"
    junit = tmp_path / "report.xml"
    result = run_cli(
        "verify", "llava", "--port", str(port), "--probes", "3", "--junit", str(junit)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    suite = ElementTree.parse(junit).getroot()
    names = [case.get("name") for case in suite.iter("testcase")]
    assert names == [
        "tokens",
        "placeholders",
        "fields",
        "cache",
        "embeds",
        "dummy",
        "limits",
        "model",
        "serve",
    ]
    # Each case says how many comparisons it made.
    runs = {
        case.get("name"): case.find("properties/property[@name='runs']").get("value")
        for case in suite.iter("testcase")
    }
    assert int(runs["tokens"]) >= 3 and runs["model"] == "0"
    assert suite.get("failures") == "0"
    # Without --model the model check is reported as skipped, and says how to run it.
    model = next(case for case in suite.iter("testcase") if case.get("name") == "model")
    assert "--model" in model.find("skipped").get("message")


def test_scaffold_into_an_unwritable_place_is_a_user_error_before_any_work(
    tmp_path,
) -> None:
    """A directory that cannot be made is the user's to change (exit 2, one line), said
    before the snapshot is even resolved: the reference is one that does not exist."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_cli("scaffold", "no_such_model_type", "-o", str(blocker / "port"))
    _assert_user_error(result, "is not a directory")
    assert "no_such_model_type" not in result.stderr


def test_scaffold_names_both_or_neither_destination_apart(tmp_path) -> None:
    neither = invoke("scaffold", "llava")
    both = invoke(
        "scaffold", "llava", "-o", str(tmp_path), "--vllm-tree", str(tmp_path)
    )
    _assert_user_error(neither, "-o DIR, or --vllm-tree")
    _assert_user_error(both, "give one of them")
    assert neither.stderr != both.stderr


def test_scaffold_refuses_an_existing_port_before_the_analysis(
    tmp_path, monkeypatch
) -> None:
    """The port's files already there are refused once the snapshot names its model_type,
    before the analysis runs (which would fail here: it is made to)."""
    import mmport.analyzers

    out = tmp_path / "port"
    out.mkdir()
    (out / "llava.py").write_text("# a port written by hand\n")

    def analysis_must_not_run(snapshot):
        raise AssertionError("the analysis ran")

    monkeypatch.setattr(mmport.analyzers, "analyze", analysis_must_not_run)
    result = invoke("scaffold", "llava", "-o", str(out))
    _assert_user_error(result, "llava.py already exists; pass --force")


def test_verify_given_the_model_class_module_names_the_processing_module(
    scaffolded,
) -> None:
    out = scaffolded("llava")
    result = invoke("verify", "llava", "--port", str(out / "llava.py"))
    _assert_user_error(result, "model class module")
    assert f"--port {out / 'llava_processing.py'}" in result.stderr.replace("\n", "")


def test_verify_a_port_generated_for_another_family_says_which(scaffolded) -> None:
    out = scaffolded("paligemma")
    result = invoke("verify", "llava", "--port", str(out / "paligemma_processing.py"))
    _assert_user_error(result, "was generated for `paligemma`")


def test_a_rejected_processor_kwarg_is_named_with_hfs_reason(scaffolded) -> None:
    """transformers' validation message puts its reason on a second line; the one
    line a user reads carries it."""
    out = scaffolded("llava")
    result = invoke(
        "verify",
        "llava",
        "--port",
        str(out / "llava_processing.py"),
        "--processor-kwargs",
        '{"do_center_crop": "yes"}',
    )
    _assert_user_error(result, "Validation error for field 'do_center_crop'")
    assert "got str" in result.stderr.replace("\n", "")
