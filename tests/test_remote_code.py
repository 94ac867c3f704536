"""Remote-code snapshots: nothing of theirs runs without --trust-remote-code; with it, zero-edit ports pass.

The snapshots are built from real code (tests/remote_snapshots.py): a
family's modules copied out of the installed transformers, renamed, with
``auto_map`` pointing at them, plus one processor in the older
``__call__``-replacement style. Each copied module records in a sentinel
file when it runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import invoke
from remote_snapshots import PREFIX, old_style_snapshot, remote_snapshot

# One family of each kind: fixed count, any-resolution tiles, dynamic grid with
# video, tiling with row/column tokens, insertion before the prompt.
FAMILIES = ("llava", "llava_next", "qwen2_vl", "idefics3", "paligemma")


def _snapshot(kind: str, directory: Path, sentinel: Path) -> Path:
    return (
        old_style_snapshot(directory, sentinel)
        if kind == "old-style"
        else remote_snapshot(kind, directory, sentinel)
    )


def _ran(sentinel: Path) -> list[str]:
    return sentinel.read_text().split() if sentinel.exists() else []


@pytest.fixture(scope="module")
def acme_llava(tmp_path_factory) -> tuple[Path, Path]:
    """A remote-code LLaVA snapshot and its sentinel (nothing has run yet)."""
    root = tmp_path_factory.mktemp("remote")
    return remote_snapshot(
        "llava", root / "acme_llava", root / "ran.txt"
    ), root / "ran.txt"


def test_without_the_flag_inspect_reads_the_code_statically(acme_llava):
    snapshot, sentinel = acme_llava
    result = invoke("inspect", str(snapshot), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["static"] is True
    facts = {(f["fact"], f["value"]): f["source"] for f in report["facts"]}
    processor = next(key for key in facts if key[0] == "processor")
    assert processor[1].startswith(f"{PREFIX}LlavaProcessor(")
    # Provenance names the snapshot's own file and the line of the class.
    source = facts[processor]
    lines = (snapshot / source["file"]).read_text().splitlines()
    assert lines[source["line"] - 1].startswith(f"class {PREFIX}LlavaProcessor")
    assert any(fact == "processor default image_token" for fact, _ in facts)
    assert report["unsettled"], (
        "a static read must say what only running the code settles"
    )
    assert _ran(sentinel) == []


def test_without_the_flag_scaffold_and_verify_refuse_in_one_line(
    acme_llava, scaffolded, tmp_path
):
    snapshot, sentinel = acme_llava
    out = tmp_path / "out"
    port = (
        scaffolded("llava") / "llava_processing.py"
    )  # a real port: verify gets as far as HF's processor
    for args in (
        ("scaffold", str(snapshot), "-o", str(out)),
        ("verify", str(snapshot), "--port", str(port)),
    ):
        result = invoke(*args)
        assert result.returncode == 2, result.stdout + result.stderr
        said = result.stderr.strip()
        assert (
            "--trust-remote-code" in said
            and "processing_acme_llava.py" in said
            and len(said.splitlines()) == 1
        )
        assert "Traceback" not in result.stdout + result.stderr
    assert not out.exists()
    assert _ran(sentinel) == []


def test_with_the_flag_a_zero_edit_port_passes(acme_llava, tmp_path):
    snapshot, sentinel = acme_llava
    out = tmp_path / "port"
    result = invoke("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code")
    assert result.returncode == 0, result.stderr
    assert _ran(sentinel), "the snapshot's code runs once the user consents"
    port = out / "acme_llava_processing.py"
    source = port.read_text()
    # The port imports nothing from the snapshot; provenance names the snapshot's files.
    assert "transformers_modules" not in source
    assert (
        "# HF: processing_acme_llava.py:" in source
        or "HF: processing_acme_llava.py:" in source
    )
    assert re.search(
        r'ModelRegistry\.register_model\(\s*"AcmeLlavaForConditionalGeneration"',
        (out / "acme_llava.py").read_text(),
    )
    result = invoke(
        "verify",
        str(snapshot),
        "--port",
        str(port),
        "--probes",
        "4",
        "--trust-remote-code",
        "--backend",
        "bundled",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_module_that_does_not_import_is_named_in_one_line(tmp_path):
    snapshot = remote_snapshot("llava", tmp_path / "broken", tmp_path / "ran.txt")
    module = snapshot / "processing_acme_llava.py"
    # As code written against another transformers release: a name this one does not have.
    module.write_text(
        module.read_text() + "\nfrom transformers.image_utils import NoSuchHelper\n"
    )
    result = invoke(
        "scaffold", str(snapshot), "-o", str(tmp_path / "out"), "--trust-remote-code"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stderr.strip()
    assert (
        "processing_acme_llava.py" in said
        and "NoSuchHelper" in said
        and len(said.splitlines()) == 1
    )
    assert not (tmp_path / "out").exists()


# A package no one installs: the snapshot's code imports it in its own module (transformers'
# check_imports stops there, before any of the code runs) or in a sibling module it imports
# (the import fails while the code runs).
ABSENT = "mmport_absent_pkg_for_test"


def _needs_absent_package(snapshot: Path, where: str) -> tuple[str, int]:
    """Make the snapshot's processing module need :data:`ABSENT` (``where``: ``"module"`` or ``"sibling"``); the importing file and line."""
    module = snapshot / "processing_acme_llava.py"
    if where == "module":
        module.write_text(module.read_text() + f"\nimport {ABSENT}\n")
        return module.name, len(module.read_text().splitlines())
    module.write_text(module.read_text() + "\nfrom .acme_helpers import to_pair\n")
    (snapshot / "acme_helpers.py").write_text(
        f'"""Helpers."""\n\nfrom {ABSENT}.layers import to_2tuple as to_pair\n'
    )
    return "acme_helpers.py", 3


@pytest.mark.parametrize("where", ["module", "sibling"])
def test_a_package_the_code_needs_but_lacks_is_named_in_one_line(
    where, scaffolded, tmp_path
):
    snapshot = remote_snapshot("llava", tmp_path / "needy", tmp_path / "ran.txt")
    file, line = _needs_absent_package(snapshot, where)
    out = tmp_path / "out"
    port = scaffolded("llava") / "llava_processing.py"
    commands = (
        ("inspect", str(snapshot), "--trust-remote-code"),
        ("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code"),
        ("verify", str(snapshot), "--port", str(port), "--trust-remote-code"),
    )
    for args in commands:
        result = invoke(*args)
        assert result.returncode == 2, result.stdout + result.stderr
        said = result.stderr.strip()
        assert (
            len(said.splitlines()) == 1
            and "Traceback" not in result.stdout + result.stderr
        ), said
        assert (
            f"{file}:{line} needs the package `{ABSENT}`, which is not installed (pip install {ABSENT})"
            in said
        )
    assert not out.exists()


def test_without_the_flag_inspect_names_the_package_the_code_lacks(tmp_path):
    snapshot = remote_snapshot("llava", tmp_path / "needy", tmp_path / "ran.txt")
    file, line = _needs_absent_package(snapshot, "sibling")
    result = invoke("inspect", str(snapshot), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    needs = [f for f in report["facts"] if f["fact"] == "needs package"]
    assert [(f["source"]["file"], f["source"]["line"]) for f in needs] == [(file, line)]
    assert ABSENT in needs[0]["value"]
    assert any(f["fact"] == "processor" for f in report["facts"]), (
        "the rest of the static read still comes"
    )
    assert _ran(tmp_path / "ran.txt") == []


def test_a_name_an_installed_package_lacks_names_that_package(tmp_path):
    snapshot = remote_snapshot("llava", tmp_path / "old", tmp_path / "ran.txt")
    module = snapshot / "processing_acme_llava.py"
    # As code written against another numpy: the package is there, the name is not.
    module.write_text(module.read_text() + "\nfrom numpy import NoSuchHelper\n")
    result = invoke(
        "scaffold", str(snapshot), "-o", str(tmp_path / "out"), "--trust-remote-code"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stderr.strip()
    assert len(said.splitlines()) == 1 and "Traceback" not in said
    assert "processing_acme_llava.py" in said and "no `NoSuchHelper` in `numpy`" in said
    assert "install the numpy release" in said and "pip install" not in said


@pytest.mark.slow
@pytest.mark.parametrize("kind", [*FAMILIES, "old-style"])
def test_remote_code_family_ports_and_verifies(kind, tmp_path):
    from conftest import verify_report

    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.sources import resolve

    sentinel = tmp_path / "ran.txt"
    snapshot = _snapshot(kind, tmp_path / "snapshot", sentinel)
    spec = analyze(resolve(str(snapshot), trust_remote_code=True))
    write_files(render_port(spec), tmp_path / "port")
    port = tmp_path / "port" / f"{spec.module_name}_processing.py"
    assert "transformers_modules" not in port.read_text()
    code, report = verify_report(
        str(snapshot), port, probes=4, backend="bundled", trust_remote_code=True
    )
    assert code == 0, json.dumps(
        {n: c["failures"][:2] for n, c in report["checks"].items() if c["failures"]},
        indent=1,
    )
    assert _ran(sentinel)


@pytest.mark.vllm
@pytest.mark.parametrize("kind", [*FAMILIES, "old-style"])
def test_remote_code_ports_give_hf_tokens_inside_real_vllm(kind, tmp_path):
    from conftest import verify_report

    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.sources import resolve

    snapshot = _snapshot(kind, tmp_path / "snapshot", tmp_path / "ran.txt")
    spec = analyze(resolve(str(snapshot), trust_remote_code=True))
    write_files(render_port(spec), tmp_path / "port")
    port = tmp_path / "port" / f"{spec.module_name}_processing.py"
    code, report = verify_report(
        str(snapshot), port, probes=4, backend="vllm", trust_remote_code=True
    )
    assert report["backend"].startswith("vllm")
    assert code == 0, json.dumps(
        {n: c["failures"][:2] for n, c in report["checks"].items() if c["failures"]},
        indent=1,
    )


def test_a_port_vllms_lint_refuses_fails_the_scaffold_naming_the_file(tmp_path):
    # Remote code whose count helper holds a line vLLM's lint refuses and mmport
    # cannot rewrite (an ambiguous name, E741): the port is written, and the
    # scaffold fails as mmport's own fault, naming the file.
    snapshot = remote_snapshot("llava_next", tmp_path / "lax", tmp_path / "ran.txt")
    module = snapshot / "processing_acme_llava_next.py"
    source = module.read_text()
    signature = re.search(
        r"\n    def _get_number_of_features\(self[^)]*\)[^:]*:\n", source
    )
    assert signature is not None, "llava_next's count helper moved"
    module.write_text(
        source[: signature.end()]
        + "        l = orig_height\n"
        + source[signature.end() :]
    )
    out = tmp_path / "out"
    result = invoke("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code")
    assert result.returncode == 3, result.stdout + result.stderr
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and "acme_llava_next_processing.py" in said[0], said
    assert "E741" in result.stdout
    assert (out / "acme_llava_next_processing.py").is_file()
    # The same snapshot without the line scaffolds clean: the failure is that line.
    module.write_text(source)
    clean = invoke(
        "scaffold", str(snapshot), "-o", str(tmp_path / "clean"), "--trust-remote-code"
    )
    assert clean.returncode == 0 and "vLLM's lint" not in clean.stdout, clean.stdout
