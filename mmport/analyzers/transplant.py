"""Transplant HF functions, and the methods and functions they call, into a port.

A count often lives in helpers rather than in the hook itself::

    num_image_tokens = self._get_number_of_features(orig_height, orig_width, height, width)

    def _get_number_of_features(self, orig_height, orig_width, height, width):
        height_best, width_best = select_best_resolution([orig_height, orig_width], pinpoints)
        ...

The port gets each of them as a module-level function, verbatim but for two
rewrites: ``self`` becomes an explicit first parameter (``processor`` or
``image_processor``), and ``self.helper(args)`` becomes ``helper(processor,
args)``. Free names are resolved in the HF module's globals: a module, or a name the
standard library exports, becomes an import; a transformers function is transplanted in turn (recursively);
a module-level constant (``MAX_IMAGE_SIZE = 4096``) is copied with its line;
anything else refuses the transplant, so the caller falls back to delegation.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, ScopeProvider

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.sourcefile import parse_class, relative_source_path
from mmport.errors import AnalysisError
from mmport.hf.code import defining_class, is_hf_code, transformers_classes
from mmport.hf.syntax import rewritten
from mmport.spec import HelperFunction, Source

__all__ = ["Transplanter", "free_names"]


def free_names(code: str) -> set[str]:
    """Names that ``code`` reads but neither binds nor finds among builtins."""
    wrapper = MetadataWrapper(cst.parse_module(code))
    scopes = {
        scope for scope in wrapper.resolve(ScopeProvider).values() if scope is not None
    }
    free = set()
    for scope in scopes:
        for access in scope.accesses:
            name = access.node.value if isinstance(access.node, cst.Name) else None
            if name and not access.referents and not hasattr(builtins, name):
                free.add(name)
    return free


class _BuiltinAnnotations(cst.CSTTransformer):
    """Drop annotations that name anything but builtins (``ImageInput``, a typing alias).

    They document HF's API; in a port they would only drag HF's typing
    aliases along, and a transplant must not fail on a hint.
    """

    def leave_Param(
        self, original_node: cst.Param, updated_node: cst.Param
    ) -> cst.Param:
        annotation = original_node.annotation
        if annotation is not None and any(
            not hasattr(builtins, n) for n in _annotation_names(annotation)
        ):
            tight = cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            )
            return updated_node.with_changes(
                annotation=None,
                equal=tight if updated_node.default is not None else updated_node.equal,
            )
        return updated_node

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        returns = original_node.returns
        if returns is not None and any(
            not hasattr(builtins, n) for n in _annotation_names(returns)
        ):
            return updated_node.with_changes(returns=None)
        return updated_node


def _annotation_names(annotation: cst.Annotation) -> set[str]:
    names: set[str] = set()

    class _Visitor(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.add(node.value)

    annotation.visit(_Visitor())
    return names


# Private methods of transformers' shared base classes that older 5.x releases lack or
# inline (5.19's ``preprocess`` merges and standardizes its kwargs itself), keyed to the
# function of the shared support module (templates/support.py.jinja) that does the same
# on the live processor, owner first. A port calls that function, so it runs on either
# release and carries no copy of HF's base class.
SUPPORT_EQUIVALENTS = {"_merge_and_standardize_kwargs": "merge_and_standardize_kwargs"}


class _Rewrite(cst.CSTTransformer):
    """``self`` → ``owner``; ``self.m(...)`` → ``m(owner, ...)`` for the methods in ``methods``.

    ``super().m(...)`` → ``parent_m(owner, ...)``, where ``parent`` names the
    transformers class after ``defined_in`` in ``owner_cls``'s MRO that defines
    ``m``: the port holds that method too, under its own name.

    With ``bound_shared``, a public method transformers' shared base classes
    define stays a call on the live object, ``owner.m(...)`` (through
    ``super()``: ``Base.m(owner, ...)``, ``Base`` imported), as HF runs it: the
    port uses HF's helper, not a copy. A private one that the shared support
    module does on the live object (``SUPPORT_EQUIVALENTS``) becomes a call of
    that function, named in ``support``; another private one is copied, as
    older 5.x releases lack some.
    """

    def __init__(
        self,
        owner: str,
        owner_cls: type[Any],
        defined_in: type[Any],
        *,
        bound_shared: bool = False,
    ) -> None:
        self.owner = owner
        self.owner_cls = owner_cls
        self.defined_in = defined_in
        self.bound_shared = bound_shared
        # name → is a staticmethod (called without ``self``)
        self.methods = _methods(owner_cls)
        self.called: list[str] = []
        self.super_called: list[tuple[str, type]] = []
        self.imports: set[str] = set()
        self.support: set[str] = set()

    def _shared(
        self, klass: type[Any] | None, name: str, *, private: bool = False
    ) -> bool:
        """Whether ``klass``'s method ``name`` is one of transformers' shared base classes'.

        Only a public method stays a call on HF's own code, unless ``private``
        asks: a private one may be missing from older transformers 5.x releases.
        """
        return (
            self.bound_shared
            and (private or not name.startswith("_"))
            and klass is not None
            and is_hf_code(klass.__module__)
            and _is_shared_utility(klass, klass.__name__)
        )

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        func = original_node.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            name = func.attr.value
            if name in self.methods and self._shared(
                defining_class(self.owner_cls, name), name
            ):
                return updated_node
            if name in SUPPORT_EQUIVALENTS and self._shared(
                defining_class(self.owner_cls, name), name, private=True
            ):
                self.support.add(SUPPORT_EQUIVALENTS[name])
                return updated_node.with_changes(
                    func=cst.Name(SUPPORT_EQUIVALENTS[name]),
                    args=(cst.Arg(cst.Name(self.owner)), *updated_node.args),
                )
            if name in self.methods:
                self.called.append(name)
                owner = () if self.methods[name] else (cst.Arg(cst.Name(self.owner)),)
                return updated_node.with_changes(
                    func=cst.Name(name), args=(*owner, *updated_node.args)
                )
        if _is_super_call(func):
            name = func.attr.value
            parent = _overridden(self.owner_cls, self.defined_in, name)
            if parent is None:
                raise AnalysisError(
                    f"`super().{name}` has no transformers definition to carry into a port"
                )
            static = isinstance(vars(parent)[name], staticmethod)
            owner = () if static else (cst.Arg(cst.Name(self.owner)),)
            if self._shared(parent, name):
                self.imports.add(f"from {parent.__module__} import {parent.__name__}")
                return updated_node.with_changes(
                    func=cst.Attribute(cst.Name(parent.__name__), cst.Name(name)),
                    args=(*owner, *updated_node.args),
                )
            self.super_called.append((name, parent))
            return updated_node.with_changes(
                func=cst.Name(inherited_name(parent, name)),
                args=(*owner, *updated_node.args),
            )
        return updated_node

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return (
            updated_node.with_changes(value=self.owner)
            if original_node.value == "self"
            else updated_node
        )


def _is_super_call(func: cst.BaseExpression) -> TypeGuard[cst.Attribute]:
    """``super().m`` (the zero-argument form, as HF writes it)."""
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Call)
        and isinstance(func.value.func, cst.Name)
        and func.value.func.value == "super"
        and not func.value.args
    )


def inherited_name(parent: type[Any], name: str) -> str:
    """The port's name for ``parent``'s ``name``, which a subclass's override calls through ``super()``.

    ``BaseImageProcessor._standardize_kwargs`` becomes
    ``_base_image_processor_standardize_kwargs``: the override keeps the plain name.
    """
    snake = re.sub(r"(?<!^)(?=[A-Z][a-z])|(?<=[a-z0-9])(?=[A-Z])", "_", parent.__name__)
    return f"_{snake.lower()}_{name.lstrip('_')}"


def _overridden(owner_cls: type[Any], defined_in: type[Any], name: str) -> type | None:
    """The transformers class after ``defined_in`` in ``owner_cls``'s MRO that defines method ``name``."""
    mro = transformers_classes(owner_cls)
    after = mro[mro.index(defined_in) + 1 :] if defined_in in mro else []
    return next(
        (
            klass
            for klass in after
            if inspect.isfunction(value := vars(klass).get(name))
            or isinstance(value, staticmethod)
        ),
        None,
    )


def _parse_function(func: types.FunctionType) -> tuple[cst.FunctionDef, Source]:
    """A module-level function's tree and provenance (its ``def`` line)."""
    lines, first_line = inspect.getsourcelines(func)
    wrapper = MetadataWrapper(
        cst.parse_module(textwrap.dedent("".join(lines))), unsafe_skip_copy=True
    )
    funcdef = next(s for s in wrapper.module.body if isinstance(s, cst.FunctionDef))
    line = wrapper.resolve(PositionProvider)[funcdef.name].start.line + first_line - 1
    return funcdef, Source(
        relative_source_path(inspect.getsourcefile(func) or ""),
        line,
        f"def {func.__name__}(...)",
    )


def _without_docstring(funcdef: cst.FunctionDef) -> cst.FunctionDef:
    """The port cites the HF line instead of repeating HF's docstring."""
    body = list(funcdef.body.body)
    first = body[0] if body else None
    if (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        and len(body) > 1
    ):
        return funcdef.with_changes(body=funcdef.body.with_changes(body=body[1:]))
    return funcdef


class Transplanter:
    """Collects the helpers and imports a piece of transplanted code needs.

    One instance per count rule: ``code()`` rewrites a snippet of an HF
    method, queuing what it calls; ``helpers`` and ``imports`` then list, in
    dependency order, everything the port must define or import.
    """

    def __init__(self, *, import_shared: bool = False) -> None:
        self.helpers: dict[str, HelperFunction] = {}
        self.imports: set[str] = set()
        # Functions of the shared support module the code calls (``SUPPORT_EQUIVALENTS``).
        self.support: set[str] = set()
        # Import functions of transformers' shared utilities instead of transplanting them.
        self.import_shared = import_shared

    def code(
        self,
        node: cst.CSTNode,
        owner_cls: type[Any],
        owner: str,
        defined_in: type[Any] | None = None,
    ) -> str:
        """Port code for ``node`` (part of a method of ``owner_cls`` defined in ``defined_in``), helpers queued."""
        rewrite = _Rewrite(
            owner, owner_cls, defined_in or owner_cls, bound_shared=self.import_shared
        )
        code = cst.Module([]).code_for_node(rewritten(node, rewrite)).strip()
        self.imports |= rewrite.imports
        self.support |= rewrite.support
        for name in rewrite.called:
            self.method(owner_cls, name, owner)
        for name, parent in rewrite.super_called:
            self.method(owner_cls, name, owner, defined_in=parent)
        return code

    def resolve(self, code: str, namespace: dict, where: str) -> None:
        """Import or transplant each free name of ``code`` from the HF ``namespace``."""
        for name in sorted(free_names(code) - self.support):
            value = namespace.get(name)
            if isinstance(value, types.ModuleType) and value.__name__ == name:
                self.imports.add(f"import {name}")
            elif isinstance(value, types.ModuleType) and "." not in value.__name__:
                self.imports.add(f"import {value.__name__} as {name}")  # ``np``
            elif isinstance(value, types.ModuleType) and (
                value.__name__.rpartition(".")[2] == name
            ):
                parent = value.__name__.rpartition(".")[0]
                self.imports.add(f"from {parent} import {name}")  # ``nn``
            elif isinstance(value, types.ModuleType):
                self.imports.add(f"import {value.__name__} as {name}")  # ``F``
            elif _from_stdlib(value, name):
                self.imports.add(f"from {value.__module__} import {name}")
            elif (
                _is_transformers_function(value)
                and self.import_shared
                and _is_shared_utility(value, name)
            ):
                self.imports.add(
                    f"from {inspect.unwrap(value).__module__} import {name}"
                )
            elif _is_transformers_function(value):
                self._function_or_import(value, name)
            elif _from_installed_package(value, name):
                self.imports.add(f"from {value.__module__} import {name}")
            elif (
                logger_line := _module_logger_line(value, namespace, name)
            ) is not None:
                # HF's own idiom, so `logger.warning_once` works as in HF.
                self.imports.add("from transformers.utils import logging")
                self.helpers.setdefault(
                    name,
                    HelperFunction(
                        name, f"{name} = logging.get_logger(__name__)", logger_line
                    ),
                )
            elif _is_transformers_utility_class(value, name):
                self.imports.add(f"from {value.__module__} import {name}")
            elif name not in self.helpers and (
                constant_line := _constant_line(namespace, name)
            ):
                self.helpers[name] = HelperFunction(
                    name, f"{name} = {value!r}", constant_line
                )
            elif name not in self.helpers:
                raise AnalysisError(
                    f"{where} reads `{name}`, which mmport cannot carry into a port"
                )

    def method(
        self,
        owner_cls: type[Any],
        name: str,
        owner: str,
        *,
        defined_in: type[Any] | None = None,
    ) -> None:
        """Transplant method ``name`` of ``owner_cls`` as ``def name(owner, ...)``.

        ``defined_in`` picks an overridden definition (the target of a
        ``super()`` call), transplanted under :func:`inherited_name`.
        """
        klass = defined_in or defining_class(owner_cls, name)
        parsed = parse_class(klass) if klass is not None else None
        funcdef = parsed.methods().get(name) if parsed is not None else None
        if klass is None or parsed is None or funcdef is None:
            raise AnalysisError(f"{owner_cls.__name__}.{name} has no readable source")
        port_name = name if defined_in is None else inherited_name(klass, name)
        if port_name in self.helpers:
            return
        if any(not _is_staticmethod_decorator(d) for d in funcdef.decorators):
            raise AnalysisError(
                f"{owner_cls.__name__}.{name} is decorated; mmport transplants plain methods only"
            )
        label = f"{klass.__name__ if defined_in else owner_cls.__name__}.{name}"
        self.helpers[port_name] = HelperFunction(
            port_name, "", parsed.source(funcdef), label
        )
        # A staticmethod becomes a plain function; its decorator has no meaning there.
        code = self.code(
            rewritten(
                _without_docstring(funcdef).with_changes(
                    decorators=(), name=cst.Name(port_name)
                ),
                _BuiltinAnnotations(),
            ),
            owner_cls,
            owner,
            klass,
        )
        self.resolve(code, vars(inspect.getmodule(klass)), label)
        static = isinstance(vars(klass)[name], staticmethod)
        self._add(
            HelperFunction(port_name, code, parsed.source(funcdef), label, not static)
        )

    def function(self, func: Callable[..., Any]) -> None:
        """Transplant a module-level transformers function verbatim (with its cache decorator, if any)."""
        plain: types.FunctionType = inspect.unwrap(
            func
        )  # a transformers function, as _is_transformers_function found
        name = plain.__name__
        if name in self.helpers:
            return
        funcdef, source = _parse_function(plain)
        self.helpers[name] = HelperFunction(name, "", source)
        code = (
            cst.Module([])
            .code_for_node(
                rewritten(_without_docstring(funcdef), _BuiltinAnnotations())
            )
            .strip()
        )
        self.resolve(code, plain.__globals__, name)
        self._add(HelperFunction(name, code, source))

    def _function_or_import(self, func: Callable[..., Any], name: str) -> None:
        """Transplant ``func``; a shared transformers utility that cannot be carried is imported instead.

        Model code is always transplanted (it is what the port must show);
        ``transformers.image_utils.get_image_size`` reaches into logging and
        channel inference, which a port may as well import as it imports ``BatchFeature``.
        """
        helpers, imports = dict(self.helpers), set(self.imports)
        try:
            self.function(func)
        except AnalysisError:
            module = inspect.unwrap(func).__module__
            if (
                is_hf_code(module, models_only=True)
                or getattr(sys.modules.get(module), name, None) is not func
            ):
                raise
            self.helpers, self.imports = helpers, imports
            self.imports.add(f"from {module} import {name}")

    def add(self, helper: HelperFunction, namespace: dict) -> None:
        """Add a function mmport composed from HF lines; its free names resolve in ``namespace``."""
        self.helpers.setdefault(helper.name, helper)
        self.resolve(helper.code, namespace, helper.name)
        self._add(helper)

    def _add(self, helper: HelperFunction) -> None:
        # Re-insert so a helper follows the helpers it calls.
        self.helpers.pop(helper.name, None)
        self.helpers[helper.name] = helper


def _is_transformers_function(value: object) -> TypeGuard[Callable[..., Any]]:
    """A plain transformers function, or one behind ``functools.lru_cache``."""
    func = inspect.unwrap(value) if callable(value) else value
    return isinstance(func, types.FunctionType) and is_hf_code(func.__module__)


def _from_installed_package(value: object, name: str) -> bool:
    """A function or class another installed package exports under ``name`` (``num2words``): imported, as HF does."""
    module = getattr(value, "__module__", None) or ""
    top = module.split(".")[0]
    if (
        not module
        or is_hf_code(module)
        or top in ("transformers", "builtins", "__main__")
        or top in sys.stdlib_module_names
    ):
        return False
    return (inspect.isfunction(value) or inspect.isclass(value)) and getattr(
        sys.modules.get(module), name, None
    ) is value


def _is_shared_utility(value: Callable[..., Any], name: str) -> bool:
    """A function of transformers' shared utilities (``image_utils``, ``video_utils``), not of one model."""
    func = inspect.unwrap(value)
    module = func.__module__
    return (
        not is_hf_code(module, models_only=True)
        and getattr(sys.modules.get(module), name, None) is value
    )


def _module_logger_line(value: object, namespace: dict, name: str) -> Source | None:
    """Where the HF module sets ``logger = logging.get_logger(__name__)``, if ``value`` is that logger."""
    import logging

    return _logger_line(namespace, name) if isinstance(value, logging.Logger) else None


def _logger_line(namespace: dict, name: str) -> Source | None:
    filename = namespace.get("__file__") or ""
    if not filename:
        return None
    for node in ast.parse(Path(filename).read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return Source(
                relative_source_path(filename), node.lineno, ast.unparse(node)
            )
    return None


def _is_transformers_utility_class(value: object, name: str) -> bool:
    """A class (an enum such as ``ChannelDimension``) of transformers' shared utilities, not of one model.

    Ports import these as they import ``BatchFeature``; model code is transplanted instead.
    """
    module = getattr(value, "__module__", "") or ""
    return (
        isinstance(value, type)
        and module.startswith("transformers.")
        and not is_hf_code(module, models_only=True)
        and getattr(sys.modules.get(module), name, None) is value
    )


def _constant_line(namespace: dict, name: str) -> Source | None:
    """Where a transformers module assigns ``name`` a plain literal (number, string)."""
    value, module = namespace.get(name), namespace.get("__name__", "")
    if (
        type(value) not in (int, float, str, bool)
        or not is_hf_code(module)
        or name not in namespace
    ):
        return None
    filename = namespace.get("__file__") or ""
    for node in ast.parse(Path(filename).read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if (
            any(isinstance(t, ast.Name) and t.id == name for t in targets)
            and isinstance(node, (ast.Assign, ast.AnnAssign))
            and isinstance(node.value, ast.Constant)
        ):
            return Source(
                relative_source_path(filename), node.lineno, f"{name} = {value!r}"
            )
    return None


def _is_staticmethod_decorator(decorator: cst.Decorator) -> bool:
    return (
        isinstance(decorator.decorator, cst.Name)
        and decorator.decorator.value == "staticmethod"
    )


def _from_stdlib(value: object, name: str) -> bool:
    """A class or function the standard library exports under ``name`` (``Fraction``)."""
    module = getattr(value, "__module__", None) or ""
    top = module.split(".")[0]
    return (
        top in sys.stdlib_module_names
        and not top.startswith("_")
        and getattr(sys.modules.get(module), name, None) is value
    )


def _methods(cls: type[Any]) -> dict[str, bool]:
    """Methods of ``cls`` by name, each with whether it is a staticmethod."""
    found = {}
    for name in dir(cls):
        if inspect.isfunction(getattr(cls, name, None)):
            found[name] = isinstance(inspect.getattr_static(cls, name), staticmethod)
    return found


# LLaVA-NeXT style: the count's helper method calls a module function and reads a module constant.
_ANYRES = """
import math

MAX_TILES = 12

class LlavaNextProcessor:
    def _get_number_of_features(self, orig_height: int, orig_width: int) -> int:
        tiles = min(math.ceil(orig_height / self.tile_size) * math.ceil(orig_width / self.tile_size), MAX_TILES)
        return tiles * self.tokens_per_tile
"""


def _transplanted(snippet: Any, owner_cls: str, method: str) -> tuple[dict, list]:
    """``method`` of the snippet's ``owner_cls`` transplanted: each helper's code by name, and the imports."""
    transplant = Transplanter()
    transplant.method(getattr(snippet, owner_cls), method, "processor")
    return (
        {name: helper.code for name, helper in transplant.helpers.items()},
        sorted(transplant.imports),
    )


EXAMPLES = [
    valid(
        "free_names_are_read_never_bound",
        "",
        lambda snippet: free_names(
            "def tiles(height, width):\n    n = math.ceil(height / TILE)\n    return n * width\n"
        ),
        {"math", "TILE"},
    ),
    valid(
        "llava_next_helper_travels_with_its_import_and_constant",
        _ANYRES,
        lambda snippet: _transplanted(
            snippet, "LlavaNextProcessor", "_get_number_of_features"
        ),
        (
            {
                "_get_number_of_features": "def _get_number_of_features(processor, orig_height: int, orig_width: int) -> int:\n"
                "    tiles = min(math.ceil(orig_height / processor.tile_size) * math.ceil(orig_width / processor.tile_size), MAX_TILES)\n"
                "    return tiles * processor.tokens_per_tile",
                "MAX_TILES": "MAX_TILES = 12",
            },
            ["import math"],
        ),
    ),
    invalid(
        "a_name_the_module_does_not_define_cannot_travel",
        """
        class LlavaNextProcessor:
            def _get_number_of_features(self, orig_height, orig_width):
                best = select_best_resolution([orig_height, orig_width], self.image_grid_pinpoints)
                return best[0] * best[1]
        """,
        lambda snippet: _transplanted(
            snippet, "LlavaNextProcessor", "_get_number_of_features"
        ),
        refusal=AnalysisError,
        match="select_best_resolution",
    ),
]
