"""DeepSeek-VL2's processor, kept in its own package (``--processor-code``), as published.

The package is deepseek-ai/DeepSeek-VL2's ``deepseek_vl2`` (tests/data/published/deepseek-vl2,
see its PROVENANCE.md). Without consent inspect reads its processor statically
and nothing runs (the package's ``__init__`` prints a line when it runs); with
consent, only the processor's module and the sibling module it imports run
(the package's ``__init__`` files, which import the model code, do not).
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli
from published import published_snapshot

# What the package's own __init__ prints when it runs.
RAN = "patching the collections module"


def _published(tmp_path: Path) -> tuple[Path, Path]:
    root = published_snapshot("deepseek-vl2", tmp_path / "deepseek-vl2")
    return root / "snapshot", root / "processor_code" / "deepseek_vl2"


def _line_of(path: Path, code: str, after: int = 0) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if i > after and code in line)


def test_inspect_reads_the_packages_processor_statically(tmp_path):
    snapshot, package = _published(tmp_path)
    result = run_cli(
        "inspect", str(snapshot), "--processor-code", str(package), "--json"
    )
    assert result.returncode == 0, result.stderr
    assert RAN not in result.stdout + result.stderr
    facts = json.loads(result.stdout)["facts"]
    module = package / "models" / "processing_deepseek_vl_v2.py"
    processor = next(f for f in facts if f["fact"] == "processor")
    assert processor["value"].startswith("DeepseekVLV2Processor(")
    start = _line_of(module, "class DeepseekVLV2Processor(")
    assert processor["source"]["line"] == start
    call = next(
        f
        for f in facts
        if f["fact"] == "processor defines" and "__call__" in f["value"]
    )
    assert call["source"]["line"] == _line_of(module, "def __call__(", after=start)


def test_with_consent_only_the_processors_module_is_imported(tmp_path):
    # The package's __init__ files (which print, and import the model code) never run:
    # the processor's module and conversation.py, which it imports itself, do.
    snapshot, package = _published(tmp_path)
    out = tmp_path / "out"
    result = run_cli(
        "scaffold",
        str(snapshot),
        "-o",
        str(out),
        "--processor-code",
        str(package),
        "--trust-remote-code",
    )
    said = result.stderr.strip()
    assert RAN not in result.stdout + said
    assert "modeling_deepseek" not in said and "siglip_vit" not in said, said
    # What stops it next: the snapshot holds no tokenizer (PROVENANCE.md).
    assert result.returncode == 2, result.stdout + said
    assert len(said.splitlines()) == 1 and "Traceback" not in said
    assert "the HF processor does not load" in said and "tokenizer" in said, said
    assert not out.exists()
