"""Code a snapshot ships itself (``auto_map``): what it is, and the consent it needs to run.

A hub repo for a model transformers does not know yet carries its own
``configuration_*.py``, ``processing_*.py`` (and image/video processing) modules,
named by ``auto_map`` in ``config.json`` and the processor configs. HF imports
them only with ``trust_remote_code=True``, under :data:`mmport.hf.code.REMOTE_CODE_PACKAGE`;
mmport asks for ``--trust-remote-code`` before anything does.
"""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Iterator
from pathlib import Path

from mmport.errors import RemoteCodeConsentError, one_line
from mmport.hf.code import REMOTE_CODE_PACKAGE

__all__ = ["CONFIG_FILES", "auto_references", "consent_error", "import_problem", "shipped_modules"]

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


def import_problem(exc: BaseException) -> str | None:
    """For an import error raised inside a snapshot's own module: which module, and which name it lacks."""
    if not isinstance(exc, ImportError):
        return None
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if REMOTE_CODE_PACKAGE in Path(frame.filename).parts]
    if not frames:
        return None
    # "cannot import name 'X' from 'Y'" (Y in exc.name), or "No module named 'Y'".
    name = re.search(r"cannot import name '([^']+)'", str(exc))
    missing = f"no `{name[1]}` in `{exc.name}`" if name else f"no module `{exc.name}`" if exc.name else one_line(exc)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}"
    return (
        f"the snapshot's {where} does not import under transformers {_transformers_version()}: {missing}; "
        "install the transformers release the snapshot was written for, or update its code"
    )


def _transformers_version() -> str:
    import transformers

    return transformers.__version__
