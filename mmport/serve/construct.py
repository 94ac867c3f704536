"""Does a generated model class construct in vLLM? Each class built under a real ``VllmConfig``.

vLLM builds a model class once per engine start, from the checkpoint's
config; a class that reads an attribute its config lacks, or builds a
module from the wrong sub-config, fails there, before any request. This
builds each port's class the way vLLM's loader does, in the serve
environment (:mod:`mmport.serve._construct`, one process for many ports),
from a tiny twin of the snapshot's config (:func:`mmport.hf.tiny.twin_dict`,
with the head size vLLM's CPU attention serves) beside its processor files,
without weights.
"""

from __future__ import annotations

import importlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

__all__ = [
    "ConstructJob",
    "Constructed",
    "construct_ports",
    "language_control_dir",
    "twin_config_dir",
]

_SCRIPT = Path(__file__).with_name("_construct.py")


@dataclass(frozen=True)
class ConstructJob:
    """One port to build: its directory, module, class name and a tiny config directory."""

    name: str
    port_dir: Path
    module: str
    architecture: str
    config_dir: Path
    # The text architecture vLLM builds the port's language model as, and a tiny config
    # of that architecture's own family (language_control_dir): built alone when the
    # class fails, it tells a text model this environment cannot build from the port's fault.
    language: tuple[str, Path] | None = None


@dataclass(frozen=True)
class Constructed:
    """One port's outcome: the parameter count and tower modules, or the error and where it was raised.

    ``environment`` says why the serve environment could not judge the class
    at all (its transformers lacks the family, or cannot read the config).
    ``transformers`` is the version it was built with where that is not the
    serve environment's own (see :func:`construct_ports`).
    """

    name: str
    parameters: int = 0
    towers: tuple[str, ...] = ()
    vllm_towers: tuple[str, ...] = ()  # the towers built as vLLM's own modules
    # Per modality the class parses and validates inputs for (``_parse_and_validate_``),
    # the fractions of the worst case its input classes validated, or the error.
    schema: tuple[tuple[str, tuple[float, ...] | str], ...] = ()
    error: str = ""
    port_frame: str = ""
    environment: str = ""
    transformers: str = ""

    @property
    def ok(self) -> bool:
        """Whether the class was built."""
        return not self.error and not self.environment


def twin_config_dir(snapshot: Any, directory: Path) -> Path:
    """A tiny twin of ``snapshot``'s config, beside its processor and tokenizer files (no weights)."""
    from mmport.serve.checkpoint import copy_processing_files, servable_twin

    built = servable_twin(snapshot.load_config())
    directory.mkdir(parents=True, exist_ok=True)
    copy_processing_files(snapshot, directory)
    built.save_pretrained(directory)
    return directory


def language_control_dir(
    config: Any, language: Any, directory: Path
) -> tuple[str, Path] | None:
    """The architecture vLLM builds the port's language model as (``language``: its
    :class:`~mmport.spec.LanguageModelSpec`), with a tiny twin of a config of that
    architecture's own family written to ``directory``; None where none is known.

    The family's config is the text config itself where the architecture is
    vLLM's own choice for it (the one the text config or transformers names, or
    the Transformers backend), else the default config of the model_type
    transformers maps to that architecture (a text config named after a family,
    Hunyuan V4 VL's after Hunyuan V4's).
    """
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as causal_lm,
    )

    from mmport.serve.checkpoint import servable_twin

    if language.unbuildable or not language.has_text_model or language.registers:
        return None
    text = config.get_text_config()
    named = list(getattr(text, "architectures", None) or ())
    own_choice = named[0] if named else causal_lm.get(text.model_type)
    architecture = language.architecture or own_choice
    if not architecture:
        return None
    family = text
    if architecture != own_choice and not language.transformers_backend:
        model_type = next((t for t, a in causal_lm.items() if a == architecture), None)
        if model_type is None or model_type not in CONFIG_MAPPING:
            return None
        family = CONFIG_MAPPING[model_type]()
    twin = servable_twin(family)
    twin.architectures = [architecture]
    directory.mkdir(parents=True, exist_ok=True)
    twin.save_pretrained(directory)
    return architecture, directory


def construct_ports(
    jobs: list[ConstructJob], python: Path | None = None, timeout_s: int = 900
) -> dict[str, Constructed]:
    """Build every job's class in one serve-environment process; per job, what happened.

    A process that ends without building them all (one class took all memory)
    is followed by another for the jobs after the one it ended on. Without a
    serve environment (``MMPORT_SERVE_PYTHON``) every job says so.

    A family the serve environment's transformers does not have yet (vLLM's
    CPU build pins an older one) is built again with the transformers the
    port was generated under, put ahead of the environment's own: vLLM is the
    same, and a user serving that family upgrades transformers the same way.
    """
    from mmport.serve import serve_python

    python = python or serve_python()
    if python is None:
        return {
            job.name: Constructed(job.name, error="no serve environment")
            for job in jobs
        }
    outcomes = _construct_all(jobs, python, timeout_s)
    newer = [
        job
        for job in jobs
        if outcomes[job.name].environment.startswith(_FAMILY_MISSING)
    ]
    if newer:
        import transformers

        with _this_transformers() as path:
            paths = [str(path), *filter(None, [os.environ.get("PYTHONPATH")])]
            again = _construct_all(
                newer, python, timeout_s, {"PYTHONPATH": os.pathsep.join(paths)}
            )
        for name, got in again.items():
            outcomes[name] = replace(got, transformers=transformers.__version__)
    return outcomes


# How the serve environment says its transformers lacks a module or name the port
# imports (mmport.serve._construct and _older_transformers below).
_FAMILY_MISSING = "this transformers has no "


@contextmanager
def _this_transformers() -> Iterator[Path]:
    """A directory holding (links to) this process's transformers package and its
    metadata: put on another interpreter's path, it imports this transformers."""
    import transformers

    package = Path(transformers.__file__).parent
    metadata = package.parent / f"transformers-{transformers.__version__}.dist-info"
    with tempfile.TemporaryDirectory(prefix="mmport-transformers-") as directory:
        (Path(directory) / "transformers").symlink_to(package)
        if (
            metadata.is_dir()
        ):  # importlib.metadata.version("transformers") answers this one
            (Path(directory) / metadata.name).symlink_to(metadata)
        yield Path(directory)


def _construct_all(
    jobs: list[ConstructJob],
    python: Path,
    timeout_s: int,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Constructed]:
    """Every job's outcome from serve-environment processes, a fresh one after any that died."""
    results: dict[str, dict] = {}
    remaining = list(jobs)
    answer: dict = {}
    while remaining:
        answer = _build(remaining, python, timeout_s, extra_env)
        results.update(answer.get("results", {}))
        missing = [job for job in remaining if job.name not in results]
        answered = "exit_code" in answer  # it wrote an answer, if only a partial one
        if not missing or (answered and "vllm_version" not in answer):
            break  # all built, or no vLLM to build them with (each job says so below)
        if answered and answer["exit_code"] == 0:
            break  # it ended normally without them: each says what the answer says
        # The process ended on the first job without a result (killed: out of memory, a
        # crash in C): that job fails, and a fresh process builds the ones after it.
        why = answer.get("error") or f"exit {answer['exit_code']}"
        results[missing[0].name] = {
            "error": f"the construct process ended while building it: {why}"
        }
        remaining = missing[1:]
    outcomes = {}
    for job in jobs:
        got = results.get(job.name) or {
            "error": answer.get("error", "the construct run stopped before it")
        }
        error, environment = got.get("error", ""), got.get("environment", "")
        if (older := _older_transformers(error)) is not None:
            error, environment = "", older
        outcomes[job.name] = Constructed(
            job.name,
            parameters=int(got.get("parameters", 0)),
            towers=tuple(got.get("towers", ())),
            vllm_towers=tuple(got.get("vllm_towers", ())),
            schema=tuple(
                (m, tuple(v) if isinstance(v, list) else str(v))
                for m, v in (got.get("schema") or {}).items()
            ),
            error=error,
            port_frame=got.get("port_frame") or "",
            environment=environment,
        )
    return outcomes


def _build(
    jobs: list[ConstructJob],
    python: Path,
    timeout_s: int,
    extra_env: dict[str, str] | None = None,
) -> dict:
    """One serve-environment process building ``jobs`` in order: its answer, partial if it ended early."""
    from mmport.serve import run_engine

    request = {
        "jobs": [
            {
                "name": job.name,
                "port_dir": str(job.port_dir),
                "module": job.module,
                "architecture": job.architecture,
                "config_dir": str(job.config_dir),
                "language": job.language and [job.language[0], str(job.language[1])],
            }
            for job in jobs
        ]
    }
    with tempfile.TemporaryDirectory(prefix="mmport-construct-") as workdir:
        return run_engine(python, request, Path(workdir), timeout_s, _SCRIPT, extra_env)


_CANNOT_IMPORT = re.compile(
    r"ImportError: cannot import name '(\w+)' from '(transformers[\w.]*)'"
)


def _older_transformers(error: str) -> str | None:
    """Why the serve environment could not judge a port that imports a transformers name it lacks, or None.

    A port imports what the transformers it was generated under defines; an
    older one in the serve environment may not have it yet (a processor or
    model class added since). That is the environment's doing when this
    transformers has the name, and the port's own when it has not either.
    """
    found = _CANNOT_IMPORT.search(error)
    if found is None:
        return None
    name, module = found.groups()
    try:
        defined = hasattr(importlib.import_module(module), name)
    except ImportError:
        defined = False
    if not defined:
        return None
    return (
        f"{_FAMILY_MISSING}{module}.{name} (the port was generated under a newer one)"
    )
