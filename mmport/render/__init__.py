"""Render a PortSpec into port files with the one Jinja environment.

Rendering happens fully in memory and every Python file is compiled, then
formatted with ruff at vLLM's line length (comments, docstrings and long
strings rewrapped to it: :mod:`mmport.render.reflow`) and linted with vLLM's
rules (:mod:`mmport.render.lint`), before anything touches the output
directory; files are then written through temporary names and renamed, so a
failure never leaves half a port behind.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from mmport.edgetokens import port_source
from mmport.errors import OutputExistsError, RenderError
from mmport.render.lint import LINE_LENGTH, findings, fix, format_code
from mmport.render.reflow import reflow
from mmport.render.tidy import tidy
from mmport.spec import ChatPortSpec, PortSpec, VllmModelPlan

__all__ = [
    "RenderedFile",
    "check_output",
    "port_file_names",
    "render_port",
    "write_files",
]


# template → output name, with {model} standing for the model_type as a module name.
OUTPUTS = {
    "processing.py.jinja": "{model}_processing.py",
    "model.py.jinja": "{model}.py",
    "test_port.py.jinja": "test_{model}_port.py",
}
# A processor called by a method of its own (PortSpec.entry): its processing and test only;
# the model side reads the modality specs such a port has none of.
ENTRY_OUTPUTS = {
    "entry_processing.py.jinja": "{model}_processing.py",
    "test_port.py.jinja": "test_{model}_port.py",
}


@dataclass(frozen=True)
class RenderedFile:
    """One rendered output file, not yet written."""

    name: str
    text: str
    # vLLM's lint findings left after its safe fixes (mmport.render.lint), ``name:line: CODE msg``.
    findings: tuple[str, ...] = ()
    # Shared by every port of its directory: an identical file already there is no conflict.
    shared: bool = False

    def conflicts_with(self, path: Path) -> bool:
        """Whether writing this file at ``path`` would replace something else."""
        return path.exists() and not (self.shared and path.read_text() == self.text)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("mmport", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # A double-quoted Python string literal (tojson would escape "<" as \u003c).
    env.filters["py"] = lambda value: json.dumps(value, ensure_ascii=False)
    env.tests["stdlib"] = lambda name: name.partition(".")[0] in sys.stdlib_module_names
    env.filters["import_sorted"] = _import_sorted
    env.filters["flatten"] = lambda groups: [item for group in groups for item in group]
    env.filters["tick"] = lambda name: f"`{name}`"  # a name in a docstring
    # A dotted name (``use_image_id``, ``processor.flag``) needs no parentheses after ``not``.
    # The port's step at item edges is the very function the analysis ran (mmport.edgetokens).
    env.globals["retokenize_edges_source"] = port_source()
    env.tests["identifier"] = lambda value: all(
        part.isidentifier() for part in value.split(".")
    )
    return env


def _import_module(line: str) -> str:
    """``numpy`` for ``import numpy as np``; ``functools`` for ``from functools import lru_cache``."""
    return line.split()[1]


def _import_sorted(lines, stdlib: bool) -> list[str]:
    """The standard-library (or the other) import lines, merged and ordered as isort orders them."""
    plain: set[str] = set()
    names: dict[str, set[str]] = {}
    for line in lines:
        if (
            _import_module(line).partition(".")[0] in sys.stdlib_module_names
        ) != stdlib:
            continue
        if line.startswith("from "):
            module, _, imported = line[len("from ") :].partition(" import ")
            names.setdefault(module, set()).update(
                n.strip() for n in imported.split(",")
            )
        else:
            plain.add(line)
    merged = plain | {
        f"from {module} import {', '.join(sorted(found))}"
        for module, found in names.items()
    }
    return sorted(
        merged,
        key=lambda line: (line.startswith("from "), _import_module(line).lower(), line),
    )


# What the processing modules rendered from processing.py.jinja import, one module for every
# port of an output directory (or a vLLM tree): the same text whatever the model.
SUPPORT_TEMPLATE = "support.py.jinja"
SUPPORT_MODULE = "mm_request_support.py"

# A checkpoint with no processor class: one module, the vLLM port with the HF processor it ships.
# The model class: HF's feature paths run on the modules it builds, or, where the
# analysis wrote a plan for it (PortSpec.vllm_model), vLLM's modules through their own API.
MODEL_TEMPLATE = "model.py.jinja"
VLLM_MODEL_TEMPLATE = "vllm_model.py.jinja"
CHAT_OUTPUTS = {"chat_processing.py.jinja": "{model}_processing.py"}


def render_port(spec: PortSpec | ChatPortSpec) -> list[RenderedFile]:
    """Render every output for ``spec``; each Python file must compile."""
    files = []
    if isinstance(spec, ChatPortSpec):
        outputs = CHAT_OUTPUTS
    else:
        outputs = ENTRY_OUTPUTS if spec.entry else OUTPUTS
    for template, pattern in outputs.items():
        name = pattern.format(model=spec.module_name)
        plan = getattr(spec, "vllm_model", None)
        if template == MODEL_TEMPLATE and plan is not None:
            files.append(_as_hf_wrote(_rendered(VLLM_MODEL_TEMPLATE, name, spec), plan))
            continue
        files.append(_rendered(template, name, spec))
    if outputs is OUTPUTS:
        files.append(_support_module(spec.mmport_version))
    return files


def _as_hf_wrote(rendered: RenderedFile, plan: VllmModelPlan) -> RenderedFile:
    """``rendered`` with each lint finding on a line of HF's copied code marked
    ``# noqa`` for its rule: HF's line, kept as HF wrote it (``.strip("anyres_max_")``
    in LLaVA-OneVision's helper); findings on mmport's own lines stay."""
    if not rendered.findings:
        return rendered
    copied = {line.strip() for code in plan.copied_code for line in code.splitlines()}
    lines = rendered.text.splitlines(keepends=True)
    for finding in rendered.findings:
        _, row, _, rule = finding.split(":", 3)
        index, code = int(row) - 1, rule.split()[0]
        body = lines[index].rstrip("\n")
        if body.strip() in copied and "noqa" not in body:
            lines[index] = f"{body}  # noqa: {code}\n"
    text = "".join(lines)
    return RenderedFile(rendered.name, text, findings(text, rendered.name))


@lru_cache(maxsize=4)
def _support_module(mmport_version: str) -> RenderedFile:
    """The module the generated processing modules import (SUPPORT_MODULE), one per directory."""
    text = (
        _environment()
        .get_template(SUPPORT_TEMPLATE)
        .render(mmport_version=mmport_version)
    )
    finished = _compiled_and_finished(text, SUPPORT_MODULE)
    return RenderedFile(finished.name, finished.text, finished.findings, shared=True)


def _rendered(template: str, name: str, spec: PortSpec | ChatPortSpec) -> RenderedFile:
    """``template`` rendered for ``spec`` as the file ``name``, compiled and finished."""
    try:
        text = _environment().get_template(template).render(spec=spec)
    except jinja2.TemplateError as exc:
        raise RenderError(
            f"template {template} failed for {spec.model_type}: {exc}"
        ) from None
    return _compiled_and_finished(text, name)


def _compiled_and_finished(text: str, name: str) -> RenderedFile:
    """``text`` with blank-line runs cut, compiled (a RenderError if it does not), finished."""
    # Optional template blocks leave blank-line runs; PEP 8 allows two at most.
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    try:
        compile(text, name, "exec")
    except SyntaxError as exc:
        raise RenderError(
            f"rendered {name} does not compile (line {exc.lineno}): {exc.msg}"
        ) from None
    return _finished(text, name)


def _finished(text: str, name: str) -> RenderedFile:
    """``text`` formatted, fixed and linted as vLLM lints, its comments, docstrings and strings wrapped."""
    formatted = format_code(tidy(text), name)
    fixed = fix(formatted, name)
    if fixed != formatted:
        fixed = format_code(fixed, name)
    # Wrapped last: ruff format would join a docstring's closing quotes back up.
    finished = reflow(fixed, LINE_LENGTH)
    return RenderedFile(name, finished, findings(finished, name))


def port_file_names(module: str) -> list[str]:
    """The files a port of ``module`` (a model_type as a module name) owns in its directory."""
    return [pattern.format(model=module) for pattern in OUTPUTS.values()]


def check_output(directory: Path, existing: list[Path] | None = None) -> None:
    """Refuse, before any work, an output ``directory`` that cannot be written, or
    ``existing`` files in it that would be replaced (``--force`` passes none).

    Where the directory does not exist yet, a directory is made and removed in
    its nearest existing ancestor: what a later write would meet, found now.
    """
    if directory.exists() and not directory.is_dir():
        raise OutputExistsError(
            f"'{directory}' exists and is not a directory; choose another -o"
        )
    ancestor = next(p for p in [directory, *directory.parents] if p.exists())
    try:
        if not ancestor.is_dir():
            raise NotADirectoryError(f"'{ancestor}' is not a directory")
        tempfile.TemporaryDirectory(dir=ancestor, prefix=".mmport-").cleanup()
    except OSError as exc:
        raise OutputExistsError(
            f"cannot write the port into '{directory}': {exc.strerror or exc}; choose another -o"
        ) from None
    conflicts = [path for path in existing or [] if path.exists()]
    if conflicts:
        names = ", ".join(str(p) for p in conflicts)
        verb, them = ("exists", "it") if len(conflicts) == 1 else ("exist", "them")
        raise OutputExistsError(
            f"{names} already {verb}; pass --force to overwrite {them}"
        )


def write_files(
    files: list[RenderedFile], directory: Path, *, force: bool = False
) -> list[Path]:
    """Write ``files`` into ``directory``; refuse to overwrite unless ``force``."""
    check_output(
        directory,
        []
        if force
        else [
            directory / f.name for f in files if f.conflicts_with(directory / f.name)
        ],
    )
    staged = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for f in files:
            tmp = directory / f".{f.name}.mmport-tmp"
            tmp.write_text(f.text)
            staged.append((tmp, directory / f.name))
        for tmp, final in staged:
            os.replace(tmp, final)
    except OSError as exc:
        raise OutputExistsError(
            f"cannot write the port into '{directory}': {exc.strerror or exc}"
        ) from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return [final for _, final in staged]
