"""A processor kept outside the snapshot (``--processor-code PATH``): found by reading, run only with consent.

Some checkpoints' processors are not on the hub at all: DeepSeek-VL2 ships
``DeepseekVLV2Processor`` in a Python package of its own, and its
``processor_config.json`` names the class only (``"processor_class":
"DeepseekVLV2Processor"``). ``--processor-code PATH`` points mmport at that
code: a directory of modules, or a package.

The class is found without running anything (:func:`find_processor_code`):
every module under PATH is read with ``ast``, and the ``ProcessorMixin``
subclasses it defines are matched against the class the snapshot's configs
name. For ``procs/processing_acme.py`` holding ``class AcmeProcessor(ProcessorMixin)``
and a snapshot naming ``AcmeProcessor``::

    find_processor_code(Path("procs"), snapshot_dir)
    == ProcessorCode(root=Path("/abs/procs"), module_file="processing_acme.py", class_name="AcmeProcessor", line=4)

With ``--trust-remote-code``, :func:`import_processor_class` imports it and
registers it with ``AutoProcessor`` under its name, as vLLM registers the
processors it carries itself: HF's reference, the analyzers, and a port that
asks ``AutoProcessor`` for the snapshot's processor then all get that class.
Its modules count as model code from then on (:func:`mmport.hf.code.add_outside_code`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from mmport.errors import (
    FOREIGN_ERRORS,
    BadReferenceError,
    RemoteCodeConsentError,
    one_line,
)

if TYPE_CHECKING:  # transformers loads lazily, inside the functions that need it
    from transformers import ProcessorMixin

__all__ = [
    "ProcessorCode",
    "find_processor_code",
    "import_processor_class",
    "named_processor_class",
]

# Configs that may name the processor class, in the order AutoProcessor reads them.
_NAMING_CONFIGS = (
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "tokenizer_config.json",
    "config.json",
)
# Folders under PATH that hold no importable code.
_SKIPPED_DIRS = ("__pycache__", "build", "dist")


@dataclass(frozen=True)
class ProcessorCode:
    """Where ``--processor-code PATH``'s processor class is defined, as read (nothing run)."""

    root: Path
    module_file: (
        str  # under root: "processing_acme.py", "models/processing_deepseek_vl_v2.py"
    )
    class_name: str
    line: int

    @property
    def is_package(self) -> bool:
        """Is PATH a package (imported by its own name) rather than a folder of modules?"""
        return (self.root / "__init__.py").is_file()

    @property
    def import_root(self) -> Path:
        """The folder that goes on ``sys.path``: PATH's parent for a package, else PATH."""
        return self.root.parent if self.is_package else self.root

    @property
    def module_name(self) -> str:
        """The dotted name the module imports under (``procs.models.processing_x`` for a package ``procs``)."""
        parts = list(Path(self.module_file).with_suffix("").parts)
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        return ".".join([self.root.name, *parts] if self.is_package else parts)

    def consent_error(self, snapshot_dir: Path) -> RemoteCodeConsentError:
        """The one line for running PATH's code without ``--trust-remote-code``."""
        return RemoteCodeConsentError(
            f"{snapshot_dir}: its processor is {self.class_name} from --processor-code {self.root} ({self.module_file}:{self.line}); "
            "mmport runs none of it without --trust-remote-code. `mmport inspect` reads it without running it; "
            "pass --trust-remote-code to scaffold or verify once you trust that code"
        )


def named_processor_class(snapshot_dir: Path) -> tuple[str, str] | None:
    """``(config file, class name)`` of the processor class the snapshot's configs name, the first AutoProcessor reads."""
    for name in _NAMING_CONFIGS:
        try:
            data = json.loads((snapshot_dir / name).read_text())
        except (OSError, ValueError):
            continue  # absent or unreadable: the loaders report that themselves
        named = data.get("processor_class") if isinstance(data, dict) else None
        if isinstance(named, str) and named:
            return name, named
    return None


def find_processor_code(path: Path, snapshot_dir: Path) -> ProcessorCode:
    """The processor class of ``path`` the snapshot stands for, read without running anything.

    The class the snapshot's configs name (``processor_class``): AutoProcessor,
    and vLLM, load the processor by that name. A PATH that is not a directory or
    does not define that ``ProcessorMixin`` subclass, and a snapshot that names
    none, are a :class:`BadReferenceError`.
    """
    root = path.expanduser().resolve()
    if not root.is_dir():
        problem = "does not exist" if not root.exists() else "is not a directory"
        raise BadReferenceError(
            f"--processor-code {path} {problem}; pass the directory or package holding the processor's modules"
        )
    found = _processor_classes(root)
    named = named_processor_class(snapshot_dir)
    if not found:
        raise BadReferenceError(
            f"--processor-code {path} defines no ProcessorMixin subclass; pass the directory holding the processor's module"
        )
    if named is None:
        raise BadReferenceError(
            f"{snapshot_dir}: its configs name no processor class (processor_class in processor_config.json) for "
            f"--processor-code to stand for; AutoProcessor and vLLM find the processor by that name"
        )
    chosen = next((code for code in found if code.class_name == named[1]), None)
    if chosen is None:
        defined = ", ".join(sorted({code.class_name for code in found}))
        raise BadReferenceError(
            f"{snapshot_dir}: its {named[0]} names {named[1]}, which --processor-code {path} does not define (it defines {defined})"
        )
    return chosen


def _processor_classes(root: Path) -> list[ProcessorCode]:
    """Every class under ``root`` that derives from ``ProcessorMixin``, directly or through others found here or in transformers."""
    classes = [
        (module, node)
        for module, tree in _modules(root)
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    ]
    processors: dict[str, ProcessorCode] = {}
    grew = True
    while (
        grew
    ):  # a subclass may come before its base in the walk: repeat until nothing is added
        grew = False
        for module, node in classes:
            if node.name not in processors and any(
                _is_processor_base(_base_name(b), processors) for b in node.bases
            ):
                processors[node.name] = ProcessorCode(
                    root, module, node.name, node.lineno
                )
                grew = True
    return list(processors.values())


def _modules(root: Path) -> Iterator[tuple[str, ast.Module]]:
    """Each module under ``root`` that parses, by its path under ``root``; hidden and build folders skipped."""
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if any(
            part.startswith(".") or part in _SKIPPED_DIRS
            for part in relative.parts[:-1]
        ):
            continue
        try:
            yield str(relative), ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue  # not where the processor is; importing it would say why


def _base_name(base: ast.expr) -> str:
    """A base class's own name: ``ProcessorMixin`` for ``processing_utils.ProcessorMixin``."""
    return (
        base.attr
        if isinstance(base, ast.Attribute)
        else base.id
        if isinstance(base, ast.Name)
        else ""
    )


def _is_processor_base(name: str, found: dict[str, ProcessorCode]) -> bool:
    """Is ``name`` ``ProcessorMixin``, a processor class found under PATH, or one of transformers' processors?"""
    if name == "ProcessorMixin" or name in found:
        return True
    if not name.endswith("Processor"):
        return False
    import transformers

    # transformers' own classes may run: only PATH's code needs consent.
    klass = getattr(transformers, name, None)
    return isinstance(klass, type) and issubclass(klass, transformers.ProcessorMixin)


def import_processor_class(code: ProcessorCode) -> type[ProcessorMixin]:
    """Import PATH's processor class (the user consented) and register it with ``AutoProcessor`` by name.

    Anything that keeps it from being the class AutoProcessor loads for the
    snapshot is a :class:`BadReferenceError` naming the file and what to do.
    """
    from transformers import ProcessorMixin

    from mmport.hf.code import add_outside_code

    add_outside_code(code.root, code.import_root)
    module = _import(code)
    klass = getattr(module, code.class_name, None)
    if not (isinstance(klass, type) and issubclass(klass, ProcessorMixin)):
        raise BadReferenceError(
            f"{code.root / code.module_file}: {code.class_name} is not a ProcessorMixin subclass once imported"
        )
    _register(klass)
    return klass


def _import(code: ProcessorCode) -> ModuleType:
    """PATH's module, imported from PATH (never from another place a module of that name lives).

    In a package, only the processor's module and the modules it imports run:
    its parent packages are made bare (:func:`_bare_parents`), since a package's
    ``__init__`` commonly imports model code (heavy, version-pinned) the processor
    never uses. A module that imports a name from a parent's ``__init__`` gets
    the package imported as Python would (:func:`_drop_bare`, then a plain import).
    """
    if not all(part.isidentifier() for part in code.module_name.split(".")):
        raise BadReferenceError(
            f"{code.root / code.module_file} cannot be imported: `{code.module_name}` is not a module name"
        )
    if str(code.import_root) not in sys.path:
        # Appended: PATH's modules shadow nothing installed, and a clash is caught below.
        sys.path.append(str(code.import_root))
    bare = _bare_parents(code)
    try:
        module = _import_module(code, bare)
    except _NeedsPackageInit:
        _drop_bare(bare)
        module = _import_module(code, bare=())
    imported = Path(getattr(module, "__file__", "") or "")
    if imported.resolve() != code.root / code.module_file:
        raise BadReferenceError(
            f"{code.root / code.module_file} cannot be imported as `{code.module_name}`: a module of that name "
            f"comes from {imported}; rename one of them"
        )
    return module


class _NeedsPackageInit(Exception):
    """The processor's module imports a name its package's ``__init__`` defines: the bare package lacks it."""


def _import_module(code: ProcessorCode, bare: tuple[str, ...]) -> ModuleType:
    """``importlib.import_module`` of PATH's module, its failures as one line naming PATH's file and line.

    An ImportError naming one of the ``bare`` packages (a name its ``__init__``
    would define) is :class:`_NeedsPackageInit`.
    """
    from mmport.sources.requirements import raised_at, unimportable

    where = code.root / code.module_file
    try:
        return importlib.import_module(code.module_name)
    except ImportError as exc:
        if exc.name in bare:
            raise _NeedsPackageInit(exc.name) from exc
        frame = raised_at(exc, lambda path: path.is_relative_to(code.root))
        if frame is None:  # the module itself was not found where PATH says
            raise BadReferenceError(
                f"{where} cannot be imported as `{code.module_name}` ({one_line(exc)})"
            ) from None
        raise BadReferenceError(
            unimportable(exc, f"--processor-code's {frame.filename}:{frame.lineno}")
        ) from None
    except FOREIGN_ERRORS as exc:  # whatever PATH's code raises as it runs is a fault of the code the user gave
        raise BadReferenceError(f"{where} does not import: {one_line(exc)}") from None


def _parent_names(code: ProcessorCode) -> tuple[str, ...]:
    """The dotted names of the processor module's parent packages, outermost first: ``("pkg", "pkg.models")``."""
    parts = code.module_name.split(".")
    return tuple(".".join(parts[:n]) for n in range(1, len(parts)))


def _bare_parents(code: ProcessorCode) -> tuple[str, ...]:
    """Put the processor module's parent packages in ``sys.modules`` without running their ``__init__``.

    Each is an empty package whose ``__path__`` is its folder under PATH, so
    ``from .conversation import x`` and ``from pkg.models.conversation import x``
    still import the sibling module. A parent already imported is left as it is
    (a clash with another place is reported once the module is imported).
    The names made bare, outermost first.
    """
    made = []
    for name in _parent_names(code):
        if name in sys.modules:
            continue
        folder = code.import_root.joinpath(*name.split("."))
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:  # as the import system links a submodule to its package
            setattr(sys.modules[parent], child, module)
        made.append(name)
    return tuple(made)


def _drop_bare(names: tuple[str, ...]) -> None:
    """Forget the bare packages ``names`` and every module imported under them, so a plain import runs their ``__init__``."""
    for name in [
        loaded
        for loaded in sys.modules
        for bare in names
        if loaded == bare or loaded.startswith(bare + ".")
    ]:
        sys.modules.pop(name, None)


def _register(klass: type) -> None:
    """Register ``klass`` with AutoProcessor by name; a transformers class of the same name would win, so refuse it."""
    from transformers import AutoProcessor
    from transformers.models.auto.processing_auto import processor_class_from_name

    AutoProcessor.register(klass.__name__, klass, exist_ok=True)
    if processor_class_from_name(klass.__name__) is not klass:
        raise BadReferenceError(
            f"transformers has a {klass.__name__} of its own, which AutoProcessor (and vLLM) load in place of "
            "--processor-code's; rename the class and the processor_class naming it"
        )
