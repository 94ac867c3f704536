"""``--processor-code PATH``: a processor kept outside the snapshot, read without consent, run with it.

As DeepSeek-VL2's: the snapshot's processor_config.json names a processor class
transformers does not have, and the class lives in a directory of its own. The
snapshot here is LLaVA's synthetic one (its real image processor and tokenizer)
naming ``AcmeCodeProcessor``, a small 5.x-style processor whose count differs
from LLaVA's (patches merged 2×2), so a run that fell back to LLaVA's
processor anywhere would show. Its module records in a sentinel file when it
runs, and each test gets a module of its own name (a process imports a name once).
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import invoke

from mmport.sources import resolve

PROCESSOR_CLASS = "AcmeCodeProcessor"
PROCESSOR = """
from transformers.image_utils import get_image_size, to_numpy_array
from transformers.processing_utils import ProcessorMixin


class AcmeCodeProcessor(ProcessorMixin):
    def __init__(self, image_processor=None, tokenizer=None, patch_size=14, merge_size=2, image_token="<image>", chat_template=None, **kwargs):
        self.patch_size = patch_size
        self.merge_size = merge_size
        self.image_token = image_token
        self.image_token_id = tokenizer.convert_tokens_to_ids(image_token)
        super().__init__(image_processor, tokenizer, chat_template=chat_template)

    def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
        height, width = get_image_size(to_numpy_array(image_inputs["pixel_values"][image_idx]))
        side = self.patch_size * self.merge_size
        return self.image_token * ((height // side) * (width // side))
"""
ABSENT = "mmport_absent_pkg_for_test"


GEOMETRY = '''
def merged_side(patch_size, merge_size):
    """The pixels one merged token covers on a side."""
    return patch_size * merge_size
'''


def _acme(
    tmp_path: Path, preamble: str = "", layout: str = "folder"
) -> tuple[Path, Path, Path]:
    """(snapshot, PATH, sentinel): LLaVA's synthetic snapshot naming the processor PATH holds.

    ``layout``: ``"folder"``, one module in a plain directory; or ``"package"``, a
    package whose processor imports a helper from a sibling module by the package's name.
    """
    snapshot = tmp_path / "snapshot"
    shutil.copytree(resolve("llava").path, snapshot)
    config = json.loads((snapshot / "processor_config.json").read_text())
    for key in ("num_additional_image_tokens", "vision_feature_select_strategy"):
        config.pop(
            key
        )  # LLaVA's; AcmeCodeProcessor takes patch_size, merge_size and image_token
    (snapshot / "processor_config.json").write_text(
        json.dumps(
            {**config, "processor_class": PROCESSOR_CLASS, "merge_size": 2}, indent=2
        )
    )
    _name_processor(snapshot / "tokenizer_config.json", PROCESSOR_CLASS)
    sentinel, unique = tmp_path / "ran.txt", uuid.uuid4().hex[:8]
    records = f"open({str(sentinel)!r}, 'a').write(__name__ + '\\n')  # records that this module ran\n"
    source = records + preamble + PROCESSOR
    if layout == "folder":
        code = tmp_path / "procs"
        module = code / f"processing_acme_{unique}.py"
    else:
        code = tmp_path / f"acme_{unique}"
        module = code / "models" / "processing_acme.py"
        module.parent.mkdir(parents=True)
        for init in (code / "__init__.py", module.parent / "__init__.py"):
            init.write_text("")
        (module.parent / "geometry.py").write_text(GEOMETRY)
        helper = f"from {code.name}.models.geometry import merged_side\n"
        source = helper + source.replace(
            "self.patch_size * self.merge_size",
            "merged_side(self.patch_size, self.merge_size)",
        )
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(source)
    return snapshot, code, sentinel


def _name_processor(config: Path, name: str | None) -> None:
    """Make ``config`` name the processor class ``name`` (None: name none)."""
    data = {
        k: v
        for k, v in json.loads(config.read_text()).items()
        if k != "processor_class"
    }
    config.write_text(
        json.dumps({**data, "processor_class": name} if name else data, indent=2)
    )


def _module(code: Path) -> Path:
    return next(code.rglob("processing_acme*.py"))


def _ran(sentinel: Path) -> list[str]:
    return sentinel.read_text().split() if sentinel.exists() else []


def _one_line(result) -> str:
    said = result.stderr.strip()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(said.splitlines()) == 1 and "Traceback" not in result.stdout + said, said
    return said


def test_without_consent_inspect_reads_it_and_nothing_of_it_runs(tmp_path, scaffolded):
    snapshot, code, sentinel = _acme(tmp_path)
    result = invoke("inspect", str(snapshot), "--processor-code", str(code), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["static"] is True and report["outside"] == [str(_module(code))]
    processor = next(f for f in report["facts"] if f["fact"] == "processor")
    assert processor["value"] == f"{PROCESSOR_CLASS}(ProcessorMixin)"
    source = processor["source"]
    assert (
        (code / source["file"])
        .read_text()
        .splitlines()[source["line"] - 1]
        .startswith(f"class {PROCESSOR_CLASS}")
    )
    assert any(
        f["fact"] == "processor defines"
        and f["value"].startswith("replace_image_token")
        for f in report["facts"]
    )
    out, port = tmp_path / "out", scaffolded("llava") / "llava_processing.py"
    for args in (
        ("scaffold", str(snapshot), "-o", str(out)),
        ("verify", str(snapshot), "--port", str(port)),
    ):
        said = _one_line(invoke(*args, "--processor-code", str(code)))
        assert (
            "--trust-remote-code" in said
            and PROCESSOR_CLASS in said
            and _module(code).name in said
        )
    assert not out.exists()
    assert _ran(sentinel) == []


def _other_class(tmp_path: Path) -> Path:
    """PATH holding a processor class, but not the one the snapshot names."""
    code = _acme(tmp_path)[1]
    module = _module(code)
    module.write_text(module.read_text().replace(PROCESSOR_CLASS, "AcmeOtherProcessor"))
    return code


def _unnamed(tmp_path: Path) -> Path:
    """PATH holding the processor, beside a snapshot whose configs name no processor class."""
    snapshot, code, _ = _acme(tmp_path)
    for name in ("processor_config.json", "tokenizer_config.json"):
        _name_processor(snapshot / name, None)
    return code


@pytest.mark.parametrize(
    ("kind", "make", "said"),
    [
        ("missing", lambda tmp: tmp / "nowhere", "does not exist"),
        ("a file", lambda tmp: _module(_acme(tmp)[1]), "is not a directory"),
        (
            "no class",
            lambda tmp: (tmp / "empty").mkdir() or tmp / "empty",
            "defines no ProcessorMixin subclass",
        ),
        (
            "another class",
            _other_class,
            f"names {PROCESSOR_CLASS}, which --processor-code",
        ),
        ("no class named", _unnamed, "its configs name no processor class"),
    ],
)
def test_a_bad_processor_code_path_is_one_line(kind, make, said, tmp_path):
    snapshot = tmp_path / "snapshot"
    path = make(tmp_path)
    if not snapshot.exists():
        snapshot = _acme(tmp_path / "other")[0]
    out = tmp_path / "out"
    for args in (
        ("inspect", str(snapshot)),
        ("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code"),
    ):
        assert said in _one_line(invoke(*args, "--processor-code", str(path)))
    assert not out.exists()


def test_with_consent_its_class_is_the_reference(tmp_path):
    snapshot, code, sentinel = _acme(tmp_path)
    result = _inspect_with_consent(snapshot, code)
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)
    assert spec["processor_class"] == PROCESSOR_CLASS
    # The count rule is read from PATH's module, provenance relative to PATH.
    (image,) = spec["modalities"]
    lines = _module(code).read_text().splitlines()
    counted = next(
        n for n, text in enumerate(lines, 1) if "def replace_image_token" in text
    )
    assert image["count"]["source"] == f"{_module(code).name}:{counted}"
    assert "merge_size" in " ".join(image["count"]["statements"])
    assert _ran(sentinel)


@pytest.mark.parametrize("layout", ["folder", "package"])
def test_with_consent_a_scaffolded_port_verifies(layout, tmp_path):
    snapshot, code, out = _scaffolded_with_consent(layout, tmp_path)
    source = (out / "llava_processing.py").read_text()
    # PATH's code is transplanted (helpers too), never imported: the port runs where PATH is not.
    shown = _module(code).relative_to(code if layout == "folder" else code.parent)
    assert f"# HF: {shown}:" in source
    assert not re.search(
        rf"^\s*(from|import) ({code.name}|{_module(code).stem})\b", source, re.MULTILINE
    )
    if layout == "package":
        assert (
            f"# HF: {code.name}/models/geometry.py:" in source
            and "def merged_side(" in source
        )
    _verifies(snapshot, code, out / "llava_processing.py", "bundled")


@pytest.mark.vllm
@pytest.mark.parametrize("layout", ["folder", "package"])
def test_with_consent_the_port_gives_hf_tokens_inside_real_vllm(layout, tmp_path):
    snapshot, code, out = _scaffolded_with_consent(layout, tmp_path)
    _verifies(snapshot, code, out / "llava_processing.py", "vllm")


def _scaffolded_with_consent(layout: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The ACME snapshot, its processor code in ``layout``, and the port scaffold wrote
    with consent to run the code."""
    snapshot, code, _ = _acme(tmp_path, layout=layout)
    out = tmp_path / "port"
    result = _scaffold(snapshot, code, out)
    assert result.returncode == 0, result.stderr
    return snapshot, code, out


def _scaffold(snapshot: Path, code: Path, out: Path):
    """``scaffold`` of ``snapshot`` into ``out``, with consent to run ``code``."""
    consent = ("--processor-code", str(code), "--trust-remote-code")
    return invoke("scaffold", str(snapshot), "-o", str(out), *consent)


def _verifies(snapshot: Path, code: Path, port: Path, backend: str) -> None:
    """``verify`` of ``port`` with consent to run ``code`` passes under ``backend``."""
    args = ("--processor-code", str(code), "--trust-remote-code", "--probes", "4")
    result = invoke(
        "verify", str(snapshot), "--port", str(port), *args, "--backend", backend
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_package_processor_code_needs_but_lacks_is_one_line(tmp_path):
    snapshot, code, _ = _acme(tmp_path, preamble=f"import {ABSENT}\n")
    module = _module(code)
    said = _one_line(_scaffold(snapshot, code, tmp_path / "out"))
    assert (
        f"{module}:2 needs the package `{ABSENT}`, which is not installed (pip install {ABSENT})"
        in said
    )
    assert not (tmp_path / "out").exists()
    # Without consent, inspect reads the code and says the same, with the line.
    result = invoke("inspect", str(snapshot), "--processor-code", str(code), "--json")
    assert result.returncode == 0, result.stderr
    needs = [
        f for f in json.loads(result.stdout)["facts"] if f["fact"] == "needs package"
    ]
    assert [(f["source"]["file"], f["source"]["line"]) for f in needs] == [
        (module.name, 2)
    ]


def _package_inits(code: Path, sentinel: Path, init: str, models_init: str) -> None:
    """Give the package layout's two ``__init__`` modules a body, each recording that it ran."""
    records = f"open({str(sentinel)!r}, 'a').write(__name__ + '\\n')\n"
    (code / "__init__.py").write_text(records + init)
    (code / "models" / "__init__.py").write_text(records + models_init)


def _inspect_with_consent(snapshot: Path, code: Path):
    return invoke(
        "inspect",
        str(snapshot),
        "--processor-code",
        str(code),
        "--trust-remote-code",
        "--json",
    )


def test_a_package_processor_imports_without_its_packages_init(tmp_path):
    # As DeepSeek-VL2's: the package's __init__ imports model code the processor never uses.
    snapshot, code, sentinel = _acme(tmp_path, layout="package")
    (code / "models" / "modeling_acme.py").write_text(f"import {ABSENT}\n")
    _package_inits(
        code, sentinel, f"import {ABSENT}\n", "from .modeling_acme import *\n"
    )
    result = _inspect_with_consent(snapshot, code)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["processor_class"] == PROCESSOR_CLASS
    # Only the processor's module ran; its sibling geometry.py was imported (it records nothing).
    assert _ran(sentinel) == [f"{code.name}.models.processing_acme"]


def test_a_package_processors_own_failing_import_is_one_line(tmp_path):
    snapshot, code, sentinel = _acme(
        tmp_path, preamble=f"import {ABSENT}\n", layout="package"
    )
    module = _module(code)
    line = module.read_text().splitlines().index(f"import {ABSENT}") + 1
    _package_inits(code, sentinel, "", "")
    said = _one_line(_scaffold(snapshot, code, tmp_path / "out"))
    assert (
        f"{module}:{line} needs the package `{ABSENT}`, which is not installed" in said
    )
    assert not (tmp_path / "out").exists()
    assert f"{code.name}.models" not in _ran(
        sentinel
    )  # its package's __init__ never ran


def test_a_package_processor_needing_its_packages_init_gets_it(tmp_path):
    # A name the package's __init__ defines: the package is imported as Python would.
    snapshot, code, sentinel = _acme(tmp_path, layout="package")
    module = _module(code)
    module.write_text(f"from {code.name} import DEFAULT_MERGE\n" + module.read_text())
    _package_inits(code, sentinel, "DEFAULT_MERGE = 2\n", "")
    result = _inspect_with_consent(snapshot, code)
    assert result.returncode == 0, result.stdout + result.stderr
    assert code.name in _ran(sentinel) and f"{code.name}.models" in _ran(sentinel)


def test_what_its_code_prints_stays_out_of_the_report(tmp_path):
    # DeepSeek-VL2's processor prints each token it adds; inspect --json's stdout is the report.
    said = "hello from the processor's module"
    snapshot, code, _ = _acme(tmp_path, preamble=f"print({said!r})\n")
    result = _inspect_with_consent(snapshot, code)
    assert result.returncode == 0, result.stdout + result.stderr
    assert said not in result.stdout + result.stderr
    assert json.loads(result.stdout)["processor_class"] == PROCESSOR_CLASS
