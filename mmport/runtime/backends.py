"""Where a port runs: under the real vLLM, or under mmport's bundled runtime.

This module is the one place that knows which. ``verify`` asks for a backend,
loads the port file through it and gets a :class:`PortRunner` that processes
prompts exactly as that backend's vLLM would::

    backend = select_backend("auto")            # real vLLM when importable
    port = backend.load_port(Path("processing.py"))
    runner = backend.build(port, snapshot.path)
    output = runner.process("USER: <image>\\nWhat is this?", {"image": [img]})
    output.placeholders["image"][0].num_embeds  # embeddings the encoder must give

Both backends return the same plain :class:`PortOutput`, so checks compare
them without knowing which ran. Nothing here imports vLLM, torch or
transformers at import time.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import itertools
import json
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable
from contextlib import AbstractContextManager
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from mmport.errors import FOREIGN_ERRORS, MmportError, PortLoadError, one_line
from mmport.runtime.runner import PortClasses, PortOutput, PortPlaceholder, PortRunner
from mmport.runtime.vllm_compat._alias import vllm_aliased, vllm_unaliased

__all__ = [
    "Backend",
    "BundledBackend",
    "PortClasses",
    "PortOutput",
    "PortPlaceholder",
    "PortRunner",
    "RealVllmBackend",
    "select_backend",
]

_BASE_NAMES = (
    "BaseProcessingInfo",
    "BaseDummyInputsBuilder",
    "BaseMultiModalProcessor",
)
_module_counter = itertools.count()
_NOT_IDENT = re.compile(r"\W")
_STUBBED_ARCHS: set[str] = set()


def _pick_class(module: ModuleType, base: type[Any]) -> type[Any] | str:
    """The one concrete subclass of ``base`` the module defines, or a line saying what is wrong."""
    defined = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, base)
        and obj is not base
        and obj.__module__ == module.__name__
    ]
    # Intermediate classes the port subclasses itself do not count.
    leaves = [
        c for c in defined if not any(o is not c and issubclass(o, c) for o in defined)
    ]
    if not leaves:
        return f"no subclass of {base.__name__}"
    if len(leaves) > 1:
        return f"{len(leaves)} subclasses of {base.__name__} ({', '.join(sorted(c.__name__ for c in leaves))})"
    return leaves[0]


def _port_package(directory: Path) -> str:
    """A fresh package over ``directory``, its ``__init__`` not run: the port's relative
    imports (``from .mm_request_support import ...``) find the files beside it."""
    package = f"mmport_port_{next(_module_counter)}"
    module = importlib.util.module_from_spec(
        importlib.machinery.ModuleSpec(package, None, is_package=True)
    )
    module.__path__ = [str(directory)]
    sys.modules[package] = module
    return package


def _import_failure(path: Path, package: str, exc: BaseException, backend: str) -> str:
    """The line saying why the port at ``path`` does not import."""
    missing = getattr(exc, "name", None) or ""
    if isinstance(exc, ModuleNotFoundError) and missing.startswith(f"{package}."):
        sibling = missing.removeprefix(f"{package}.")
        return (
            f"{path}: the port imports .{sibling}, and {path.parent} has no {sibling}.py; "
            "scaffold writes it beside the port: keep the files it wrote together"
        )
    return f"{path}: the port does not import under {backend}: {one_line(exc)}"


def _processing_sibling(path: Path) -> Path | None:
    """The processing module a model class module at ``path`` imports its processor
    from (``from .llava_processing import LlavaMultiModalProcessor``), where the file
    defines no processor of its own: the file a user meant to pass."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    defines = any(
        isinstance(node, ast.ClassDef)
        and any(ast.unparse(b).endswith("MultiModalProcessor") for b in node.bases)
        for node in tree.body
    )
    for node in tree.body:
        if defines or not isinstance(node, ast.ImportFrom):
            continue
        names = [alias.name for alias in node.names]
        if (
            node.level == 1
            and node.module
            and any(name.endswith("MultiModalProcessor") for name in names)
        ):
            return path.with_name(f"{node.module}.py")
    return None


class Backend(ABC):
    """A vLLM to run ports under; see :class:`RealVllmBackend` and :class:`BundledBackend`."""

    name: str

    @abstractmethod
    def activate(self) -> AbstractContextManager[None]:
        """The block inside which ``import vllm`` means this backend's vLLM."""

    def vllm_module(self, name: str) -> ModuleType:
        """This backend's ``vllm.<name>`` module (e.g. ``"multimodal.processing"``)."""
        with self.activate():
            return importlib.import_module(f"vllm.{name}")

    @abstractmethod
    def _make_context(
        self, snapshot_dir: Path, port: PortClasses, trust_remote_code: bool
    ) -> Any:
        """An ``InputProcessingContext`` for the snapshot (``trust_remote_code``: run the code it ships)."""

    def load_port(self, path: Path) -> PortClasses:
        """Import a port file under a fresh module name and find its three classes.

        Raises :class:`PortLoadError` when the file does not import (with the
        error's first line) or does not define exactly one concrete subclass
        of each base.
        """
        path = Path(path)
        if not path.is_file():
            raise PortLoadError(
                f"{path}: no such port file; pass the path of the port's processing module"
            )
        sibling = _processing_sibling(path)
        if sibling is not None:
            raise PortLoadError(
                f"{path} is the port's model class module, which imports its processor "
                f"from {sibling.name}; pass that processing module: --port {sibling}"
            )
        package = _port_package(path.parent)
        name = f"{package}.{_NOT_IDENT.sub('_', path.stem)}"
        # A source loader of its own: the file is Python whatever its name ends in.
        spec = importlib.util.spec_from_loader(
            name, importlib.machinery.SourceFileLoader(name, str(path))
        )
        assert (
            spec is not None and spec.loader is not None
        )  # a spec from a loader given: never None
        module = importlib.util.module_from_spec(spec)
        # Registered before running, as a normal import would (dataclasses need it).
        sys.modules[name] = module
        try:
            with self.activate():
                spec.loader.exec_module(module)
        except FOREIGN_ERRORS as exc:
            for loaded in [n for n in sys.modules if n.partition(".")[0] == package]:
                del sys.modules[loaded]
            raise PortLoadError(_import_failure(path, package, exc, self.name)) from exc
        processing = self.vllm_module("multimodal.processing")
        picked = [
            _pick_class(module, getattr(processing, base)) for base in _BASE_NAMES
        ]
        problems = [p for p in picked if isinstance(p, str)]
        if problems:
            raise PortLoadError(
                f"{path}: {'; '.join(problems)}; a port defines exactly one concrete subclass of each of "
                f"{', '.join(_BASE_NAMES)}"
            )
        info, dummy_inputs, processor = (p for p in picked if not isinstance(p, str))
        return PortClasses(info, dummy_inputs, processor, module_name=name, path=path)

    def load_registered(self, snapshot_dir: Path) -> PortClasses:
        """The processor vLLM itself registers for the snapshot's architecture (``--port vllm``)."""
        raise MmportError(
            f"--port vllm runs the processor vLLM registers, and the {self.name} registers none; "
            "run where vLLM 0.33 is importable (see docs/vllm.md) or pass a port file"
        )

    def chat_placeholders(
        self, snapshot_dir: Path, modalities: Iterable[str]
    ) -> dict[str, str]:
        """Modality → the text this vLLM writes for one item in a chat prompt of the snapshot's model.

        The bundled runtime registers no model classes, so it knows none (docs/vllm.md).
        """
        return {}

    def build(
        self, port: PortClasses, snapshot_dir: Path, *, trust_remote_code: bool = False
    ) -> PortRunner:
        """Instantiate the port's classes on a context for ``snapshot_dir``."""
        with self.activate():
            ctx = self._make_context(Path(snapshot_dir), port, trust_remote_code)
            try:
                info = port.info(ctx)
                processor = port.processor(info, port.dummy_inputs(info))
            except FOREIGN_ERRORS as exc:
                where = port.path or f"{self.name}'s own port ({port.module_name})"
                raise PortLoadError(
                    f"{where}: the port's classes fail to build: {one_line(exc)}"
                ) from exc
        return PortRunner(processor, self)


class BundledBackend(Backend):
    """mmport's own implementation of the vLLM 0.33 processing contract."""

    name = "bundled vLLM 0.33 contract"

    def activate(self) -> AbstractContextManager[None]:
        """``import vllm`` resolves to :mod:`mmport.runtime.vllm_compat` inside the block."""
        return vllm_aliased()

    def _make_context(
        self, snapshot_dir: Path, port: PortClasses, trust_remote_code: bool
    ) -> Any:
        from mmport.runtime.vllm_compat.multimodal.processing import (
            InputProcessingContext,
        )

        ctx = InputProcessingContext.from_directory(
            snapshot_dir, trust_remote_code=trust_remote_code
        )
        # As an engine started with --enable-mm-embeds: verify gives ports embeddings too.
        ctx.get_mm_config().enable_mm_embeds = True
        return ctx


class RealVllmBackend(Backend):
    """The installed vLLM, with contexts built as vLLM builds them for a local directory."""

    def __init__(self) -> None:
        try:
            with self.activate():
                vllm = importlib.import_module("vllm")
        except FOREIGN_ERRORS as exc:
            raise MmportError(
                f"vLLM cannot be imported here ({one_line(exc)}); use the bundled backend"
            ) from exc
        self.name = f"vllm {vllm.__version__}"

    def activate(self) -> AbstractContextManager[None]:
        """``import vllm`` is the installed vLLM inside the block (no alias can be active)."""
        return vllm_unaliased()

    def _make_context(
        self, snapshot_dir: Path, port: PortClasses, trust_remote_code: bool
    ) -> Any:
        from vllm.multimodal.processing import InputProcessingContext
        from vllm.tokenizers import cached_tokenizer_from_config

        if (
            port.path is not None
        ):  # vLLM's own processor (--port vllm) needs no stand-in
            self._stub_unknown_architectures(snapshot_dir, port)
        model_config = self._model_config(snapshot_dir, trust_remote_code)
        return InputProcessingContext(
            model_config, cached_tokenizer_from_config(model_config)
        )

    @staticmethod
    def _model_config(snapshot_dir: Path, trust_remote_code: bool = False) -> Any:
        """vLLM's ``ModelConfig`` for the snapshot, as verify runs every port."""
        from vllm.config import ModelConfig

        # vLLM 0.33 has the HF processor skip rescaling and normalizing when the
        # registered model normalizes on the device (`supports_mm_device_do_normalize`,
        # Qwen2-VL and kin). The port is checked as its own model class runs it, which
        # leaves that to the HF processor, as the reference does.
        try:
            return ModelConfig(
                model=str(snapshot_dir),
                tokenizer=str(snapshot_dir),
                dtype="float32",
                seed=0,
                mm_device_do_normalize=False,
                enable_mm_embeds=True,  # verify gives ports embeddings too
                trust_remote_code=trust_remote_code,
            )
        except FOREIGN_ERRORS as exc:
            raise MmportError(
                f"{snapshot_dir}: vLLM cannot configure this model: {one_line(exc)}"
            ) from exc

    def load_registered(self, snapshot_dir: Path) -> PortClasses:
        """The three classes vLLM registers for the snapshot's architecture, as vLLM resolves it."""
        model_cls, arch = self._registered_model(snapshot_dir)
        factories = getattr(model_cls, "_processor_factory", None)
        if factories is None:
            raise PortLoadError(
                f"{self.name} registers {arch} without a multimodal processor; it is not a multimodal model there"
            )
        return PortClasses(
            factories.info,
            factories.dummy_inputs,
            factories.processor,
            module_name=model_cls.__module__,
            path=None,
        )

    def chat_placeholders(
        self, snapshot_dir: Path, modalities: Iterable[str]
    ) -> dict[str, str]:
        """``get_placeholder_str`` of the model class vLLM registers: what its chat prompts write per item.

        vLLM's chat front end writes this text for each item of a message whose
        template takes text (:mod:`mmport.hf.layout`); a model vLLM does not
        register, or a modality its class does not name, gives nothing.
        """
        try:
            model_cls, _ = self._registered_model(snapshot_dir)
        except MmportError:
            return {}
        layouts = {}
        for modality in modalities:
            try:
                text = model_cls.get_placeholder_str(modality, 1)
            except FOREIGN_ERRORS:  # the class refuses the modality (ValueError) or names none: nothing to follow
                continue
            if isinstance(text, str) and text:
                layouts[modality] = text
        return layouts

    def _registered_model(self, snapshot_dir: Path) -> tuple[type[Any], str]:
        """The model class vLLM resolves for the snapshot's architecture, and that architecture."""
        config = json.loads((Path(snapshot_dir) / "config.json").read_text())
        architectures = config.get("architectures") or []
        with self.activate():
            from vllm import ModelRegistry

            known = [arch for arch in architectures if arch in _vllm_architectures()]
            if not known:
                named = ", ".join(architectures) or "no architecture"
                raise PortLoadError(
                    f"{self.name} registers no model for {named}; pass a port file instead of --port vllm"
                )
            try:
                model_cls, arch = ModelRegistry.resolve_model_cls(
                    known, model_config=self._model_config(Path(snapshot_dir))
                )
            except MmportError:
                raise
            except FOREIGN_ERRORS as exc:
                raise PortLoadError(
                    f"{self.name} cannot load its model class for {known[0]}: {one_line(exc)}"
                ) from exc
        return model_cls, arch

    def _stub_unknown_architectures(
        self, snapshot_dir: Path, port: PortClasses
    ) -> None:
        """Register a processing-only stand-in for each architecture vLLM does not know.

        A model being ported is usually not in vLLM yet, and vLLM refuses to
        configure an unknown architecture. The stand-in carries the port's
        processor registration and cannot be instantiated as a model.
        """
        from vllm import ModelRegistry

        config = json.loads((snapshot_dir / "config.json").read_text())
        known = _vllm_architectures()
        for arch in config.get("architectures") or []:
            if arch not in known:
                ModelRegistry.register_model(arch, _processing_stub(arch, port))
                _STUBBED_ARCHS.add(arch)


def _vllm_architectures() -> set[str]:
    """The architectures vLLM itself registers: not the stand-ins mmport registered (replaced per port)."""
    from vllm import ModelRegistry

    return set(ModelRegistry.get_supported_archs()) - _STUBBED_ARCHS


def _processing_stub(arch: str, port: PortClasses) -> type[Any]:
    """An ``nn.Module`` class named ``arch`` that passes vLLM's model checks but refuses to run."""
    import torch.nn as nn
    from vllm.model_executor.models.interfaces import SupportsMultiModal
    from vllm.multimodal import MULTIMODAL_REGISTRY

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(
            f"{arch} is mmport's processing-only stand-in; it has no model"
        )

    # vLLM recognises a generative model by these signatures.
    namespace = {
        "__module__": __name__,
        "__init__": lambda self, *, vllm_config, prefix="": refuse(),
        "forward": lambda self, input_ids, positions, **kwargs: refuse(),
        "embed_input_ids": refuse,
        "compute_logits": refuse,
        "get_placeholder_str": classmethod(lambda cls, modality, i: None),
    }
    stub = type(arch, (nn.Module, SupportsMultiModal), namespace)
    register = MULTIMODAL_REGISTRY.register_processor(
        port.processor, info=port.info, dummy_inputs=port.dummy_inputs
    )
    return register(stub)


@cache
def _real_vllm_problem() -> str | None:
    """Why the real vLLM's processing module cannot be imported, or ``None`` when it can."""
    try:
        with vllm_unaliased():
            importlib.import_module("vllm.multimodal.processing")
    except FOREIGN_ERRORS as exc:
        return one_line(exc)
    return None


def select_backend(prefer: str = "auto") -> Backend:
    """The backend to run ports under.

    ``"auto"``: the real vLLM when ``vllm.multimodal.processing`` imports,
    else the bundled runtime. ``"vllm"`` and ``"bundled"`` force one; forcing
    vLLM where it does not import is an :class:`MmportError`.
    """
    if prefer == "bundled":
        return BundledBackend()
    if prefer not in ("auto", "vllm"):
        raise MmportError(
            f"unknown backend {prefer!r}; choose one of auto, vllm, bundled"
        )
    problem = _real_vllm_problem()
    if problem is None:
        return RealVllmBackend()
    if prefer == "vllm":
        raise MmportError(
            f"vLLM cannot be imported here ({problem}); install vllm 0.33 or use the bundled backend"
        )
    return BundledBackend()
