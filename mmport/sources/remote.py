"""Code a snapshot ships itself (``auto_map``): what it is, and the consent it needs to run.

A hub repo for a model transformers does not know yet carries its own
``configuration_*.py``, ``processing_*.py`` (and image/video processing) modules,
named by ``auto_map`` in ``config.json`` and the processor configs. HF imports
them only with ``trust_remote_code=True``, under :data:`mmport.hf.code.REMOTE_CODE_PACKAGE`;
mmport asks for ``--trust-remote-code`` before anything does.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator
from pathlib import Path

from mmport.errors import RemoteCodeConsentError
from mmport.hf.code import REMOTE_CODE_PACKAGE
from mmport.sources.requirements import (
    missing_packages,
    not_installed,
    raised_at,
    unimportable,
)

__all__ = [
    "CONFIG_FILES",
    "auto_references",
    "consent_error",
    "import_problem",
    "refused_without_consent",
    "shipped_modules",
]

# Where transformers refuses to run a snapshot's own code without ``trust_remote_code``
# (a ValueError, raised by this function of ``transformers.dynamic_module_utils``).
CONSENT_CHECK = ("dynamic_module_utils.py", "resolve_trust_remote_code")

# Files that may carry ``auto_map``: the model config and the processor configs.
CONFIG_FILES = (
    "config.json",
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "tokenizer_config.json",
)


def auto_references(directory: Path) -> list[tuple[str, str, str]]:
    """Every ``auto_map`` entry of the snapshot's configs: (auto class, module file, class name)."""
    found = []
    for name in CONFIG_FILES:
        try:
            data = json.loads((directory / name).read_text())
        except (OSError, ValueError):
            continue  # absent or unreadable: the loaders report that themselves
        for auto_map in _auto_maps(data):
            for auto, value in auto_map.items():
                # "processing_x.XProcessor", or a [slow, fast] pair; "org/repo--module.Class" names another repo.
                for reference in value if isinstance(value, list) else [value]:
                    if isinstance(reference, str) and "." in reference:
                        module, cls = reference.split("--")[-1].rsplit(".", 1)
                        found.append((auto, module + ".py", cls))
    return found


def shipped_modules(directory: Path) -> list[str]:
    """The snapshot's own module files that ``auto_map`` entries name (``processing_x.py``, ...), sorted."""
    return sorted({module for _, module, _ in auto_references(directory)})


def _auto_maps(data: object) -> Iterator[dict]:
    """Every ``auto_map`` dict in a config, nested processor configs included."""
    if isinstance(data, dict):
        if isinstance(data.get("auto_map"), dict):
            yield data["auto_map"]
        for value in data.values():
            yield from _auto_maps(value)


def consent_error(directory: Path, what: str) -> RemoteCodeConsentError:
    """The one line for a snapshot whose code would have to run without ``--trust-remote-code``."""
    modules = ", ".join(shipped_modules(directory)) or "modules named by auto_map"
    return RemoteCodeConsentError(
        f"{directory}: {what} is the snapshot's own code ({modules}); mmport runs none of it without "
        "--trust-remote-code. `mmport inspect` reads it without running it; pass --trust-remote-code "
        "to scaffold or verify once you trust that code"
    )


def refused_without_consent(exc: BaseException) -> bool:
    """True when transformers raised ``exc`` because the snapshot's code may not run without consent.

    Read off where it was raised (transformers' ``resolve_trust_remote_code``),
    not off its message, which transformers words differently for a local
    directory, a hub repo and code in another repo.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    return (
        isinstance(exc, ValueError)
        and bool(frames)
        and (Path(frames[-1].filename).name, frames[-1].name) == CONSENT_CHECK
    )


def import_problem(exc: BaseException, directory: Path) -> str | None:
    """For an import error of the snapshot's own code in ``directory``: which module and line, and what it lacks.

    Raised while a module ran: its frame says where. Raised by transformers'
    ``check_imports`` before any of it ran: reading the modules finds the
    imports of packages that are not installed.
    """
    if not isinstance(exc, ImportError):
        return None
    frame = raised_at(exc, lambda path: REMOTE_CODE_PACKAGE in path.parts)
    if frame is not None:
        return unimportable(
            exc, f"the snapshot's {Path(frame.filename).name}:{frame.lineno}"
        )
    missing = [
        m for m in missing_packages(directory, shipped_modules(directory)) if not m.lazy
    ]
    return not_installed(missing, "the snapshot's ") if missing else None
