"""``scaffold --vllm-tree``: the port written into a vLLM source tree and registered, idempotently."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import run_cli

from mmport.render.vllm_tree import REGISTRY, TESTS_REGISTRY, register_entry

# A family vLLM 0.33 does not register, so its files are new to vLLM's tree.
FAMILY, ARCHITECTURE = "vipllava", "VipLlavaForConditionalGeneration"

TABLE = """\
_MULTIMODAL_MODELS = {
    # [Decoder-only]
    "AriaForConditionalGeneration": ("aria", "AriaForConditionalGeneration"),
    "LlavaForConditionalGeneration": ("llava", "LlavaForConditionalGeneration"),  # noqa: E501
    # [Encoder-decoder]
    "WhisperForConditionalGeneration": ("whisper", "WhisperForConditionalGeneration"),
}
"""


def _keys(source: str) -> list[str]:
    return [
        line.split('"')[1] for line in source.splitlines() if line.startswith('    "')
    ]


def test_an_entry_goes_in_alphabetical_place_in_the_first_section_once() -> None:
    edited = register_entry(
        TABLE, "_MULTIMODAL_MODELS", ARCHITECTURE, f'("{FAMILY}", "{ARCHITECTURE}")'
    )
    keys = _keys(edited)
    assert keys.index(ARCHITECTURE) == keys.index("LlavaForConditionalGeneration") + 1
    assert keys.index(ARCHITECTURE) < keys.index("WhisperForConditionalGeneration")
    # The neighbour keeps its own line's comment; the section heading stays put.
    assert '"LlavaForConditionalGeneration"' in edited.split("# noqa: E501")[0]
    assert edited.index("# [Encoder-decoder]") > edited.index(ARCHITECTURE)
    # Too long for one line at vLLM's 88 columns: one item per line, as ruff writes it.
    assert f'    "{ARCHITECTURE}": (\n        "{FAMILY}",\n' in edited
    again = register_entry(
        edited, "_MULTIMODAL_MODELS", ARCHITECTURE, f'("{FAMILY}", "{ARCHITECTURE}")'
    )
    assert again == edited


def _stand_in_tree(root: Path) -> Path:
    """A source checkout's two registries, as small tables of vLLM's shape."""
    (root / REGISTRY).parent.mkdir(parents=True)
    (root / REGISTRY).write_text(TABLE)
    (root / TESTS_REGISTRY).parent.mkdir(parents=True)
    (root / TESTS_REGISTRY).write_text(
        "_MULTIMODAL_EXAMPLE_MODELS = {\n"
        '    "AriaForConditionalGeneration": _HfExamplesInfo("rhymes-ai/Aria"),\n'
        "}\n"
    )
    return root


@pytest.mark.slow  # whole CLI or pytest-xdist sessions: the slow stage
def test_the_cli_writes_registers_and_changes_nothing_the_second_time(tmp_path) -> None:
    tree = _stand_in_tree(tmp_path / "vllm-src")
    first = run_cli("scaffold", FAMILY, "--vllm-tree", str(tree))
    assert first.returncode == 0, first.stdout + first.stderr
    models = tree / "vllm/model_executor/models"
    assert (models / f"{FAMILY}.py").is_file()
    assert (models / f"{FAMILY}_processing.py").is_file()
    assert (
        tree / "tests/models/multimodal/processing" / f"test_{FAMILY}_port.py"
    ).is_file()
    registry, examples = (
        (tree / REGISTRY).read_text(),
        (tree / TESTS_REGISTRY).read_text(),
    )
    assert f'"{ARCHITECTURE}": (\n        "{FAMILY}",' in registry
    assert f'"{ARCHITECTURE}": _HfExamplesInfo("{FAMILY}")' in examples
    second = run_cli("scaffold", FAMILY, "--vllm-tree", str(tree), "--force")
    assert second.returncode == 0 and "unchanged" in second.stdout
    assert (tree / REGISTRY).read_text() == registry
    assert (tree / TESTS_REGISTRY).read_text() == examples


def test_bad_trees_and_targets_are_one_line_and_exit_2(tmp_path) -> None:
    not_a_tree = run_cli("scaffold", FAMILY, "--vllm-tree", str(tmp_path))
    assert not_a_tree.returncode == 2 and "not a vLLM source tree" in not_a_tree.stderr
    assert "Traceback" not in not_a_tree.stderr
    both = run_cli(
        "scaffold", FAMILY, "-o", str(tmp_path / "o"), "--vllm-tree", str(tmp_path)
    )
    assert both.returncode == 2 and not (tmp_path / "o").exists()
    tree = _stand_in_tree(tmp_path / "src")
    assert run_cli("scaffold", FAMILY, "--vllm-tree", str(tree)).returncode == 0
    again = run_cli("scaffold", FAMILY, "--vllm-tree", str(tree))
    assert again.returncode == 2 and "--force" in again.stderr


@pytest.mark.vllm
def test_vllms_own_registry_lists_the_port_after_the_edit(tmp_path) -> None:
    # The wheel's registry.py, edited, imported as part of vLLM's own package.
    models = pytest.importorskip("vllm.model_executor.models")
    shipped = Path(models.__file__).with_name("registry.py")
    tree = tmp_path / "vllm-src"
    (tree / REGISTRY).parent.mkdir(parents=True)
    shutil.copy(shipped, tree / REGISTRY)
    done = run_cli("scaffold", FAMILY, "--vllm-tree", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped" in done.stdout  # a wheel ships no tests/: said, not invented
    edited = (tree / REGISTRY).read_text()
    spec = importlib.util.spec_from_file_location(
        "vllm.model_executor.models._mmport_edited_registry", tree / REGISTRY
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._MULTIMODAL_MODELS[ARCHITECTURE] == (FAMILY, ARCHITECTURE)
    assert set(module._MULTIMODAL_MODELS) - {ARCHITECTURE} == set(
        importlib.import_module(
            "vllm.model_executor.models.registry"
        )._MULTIMODAL_MODELS
    )
    formatted = subprocess.run(
        ["ruff", "format", "--check", "--line-length", "88", str(tree / REGISTRY)],
        capture_output=True,
        text=True,
    )
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    run_cli("scaffold", FAMILY, "--vllm-tree", str(tree), "--force")
    assert (tree / REGISTRY).read_text() == edited


# Slow stage: a whole scaffold in a process of its own (torch imported); the fast lane
# keeps the refusals made before any analysis.
@pytest.mark.slow
def test_a_registry_mmport_cannot_edit_leaves_the_tree_as_it_was(tmp_path) -> None:
    tree = _stand_in_tree(tmp_path / "src")
    (tree / REGISTRY).write_text("_OTHER_MODELS = {}\n")
    done = run_cli("scaffold", FAMILY, "--vllm-tree", str(tree))
    assert done.returncode == 2 and "_MULTIMODAL_MODELS" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tree / "vllm/model_executor/models" / f"{FAMILY}.py").exists()
    assert (tree / REGISTRY).read_text() == "_OTHER_MODELS = {}\n"
