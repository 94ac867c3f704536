"""Packages remote code imports only inside a function: needed only when that code runs.

Molmo-7B-D's ``resize_and_pad`` imports TensorFlow on a branch the processor
never takes (tests/test_entry_point.py); the same holds for any snapshot.
transformers' own import check refuses such a module; mmport, with consent,
loads it without the package, and inspect names the import as lazy.
"""

from __future__ import annotations

import json
import textwrap

from conftest import invoke
from remote_snapshots import remote_snapshot

# A package no one installs.
ABSENT = "mmport_absent_lazy_pkg_for_test"


def test_only_imports_inside_function_bodies_are_lazy(tmp_path):
    from mmport.hf.lazyimports import function_only_imports

    module = tmp_path / "processing_x.py"
    module.write_text(
        textwrap.dedent(
            """
            import numpy

            def resize(image, method="torch"):
                if method == "tensorflow":
                    import tensorflow as tf
                import numpy
                from PIL import Image
                return image

            class Helper:
                def run(self):
                    from einops import rearrange
            """
        )
    )
    assert function_only_imports(module) == {"tensorflow", "PIL", "einops"}


def _lazily_needs_absent_package(snapshot):
    module = snapshot / "processing_acme_llava.py"
    module.write_text(
        module.read_text()
        + f"\n\ndef _unused_branch():\n    import {ABSENT}\n    return {ABSENT}\n"
    )
    return module.name, len(module.read_text().splitlines()) - 1


def test_inspect_names_a_lazy_import_without_refusing(tmp_path):
    snapshot = remote_snapshot("llava", tmp_path / "lazy", tmp_path / "ran.txt")
    file, line = _lazily_needs_absent_package(snapshot)
    result = invoke("inspect", str(snapshot), "--json")
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)["facts"]
    assert not [f for f in facts if f["fact"] == "needs package"]
    lazy = [f for f in facts if f["fact"] == "imports lazily"]
    assert [(f["source"]["file"], f["source"]["line"]) for f in lazy] == [(file, line)]
    assert ABSENT in lazy[0]["value"]


def test_with_consent_the_code_loads_without_a_lazily_imported_package(tmp_path):
    snapshot = remote_snapshot("llava", tmp_path / "lazy", tmp_path / "ran.txt")
    _lazily_needs_absent_package(snapshot)
    out = tmp_path / "out"
    result = invoke("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code")
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(out.glob("*_processing.py"))
