"""Generated model classes built under a real ``VllmConfig``: the serve environment's side of ``construct_ports``.

Run by the serve environment's python (``MMPORT_SERVE_PYTHON``), never
imported by mmport itself: it needs only the standard library, vLLM and
``_engine.py`` beside it. It
reads one JSON request and writes one JSON answer::

    python _construct.py request.json answer.json

request: ``{"jobs": [{"name": "llava", "port_dir": DIR, "module": "llava",
"architecture": "LlavaForConditionalGeneration", "config_dir": DIR}]}``;
``config_dir`` holds a config (a tiny twin's) and the processor files, no
weights. Each job's class is registered under its architecture and built as
vLLM's model loader builds it: inside ``set_current_vllm_config``, with
tensor and pipeline parallel groups of one, on the CPU. The answer holds, per
job, the parameter count and the modules vLLM marked as towers, or the
error and where in the port's files it was raised, or (``environment``) why
this environment cannot build any class of the family: its transformers
lacks the HF modules the port imports, it cannot read the config, HF's own
model class cannot be built from the twin either, vLLM's own class for the
architecture (where vLLM ships one) fails on the same twin as well, or the
text architecture the port has vLLM build fails alone, with the same error,
on a tiny config of its own family (``language``: ``[architecture,
config_dir]``, optional), so the environment, not the port, is what cannot
build it.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

try:
    from mmport.serve._engine import FOREIGN_ERRORS, port_frame
except ImportError:  # run as a script in the serve environment: _engine.py beside it
    from _engine import (  # type: ignore[import-not-found,no-redef]
        FOREIGN_ERRORS,
        port_frame,
    )

_PACKAGE = "mmport_constructed_port"


def _port_class(port_dir: str, module: str, architecture: str, index: int):
    """Import the port as a package of its own (its files import each other relatively)."""
    root = Path(tempfile.mkdtemp(prefix="mmport-construct-"))
    package = root / f"{_PACKAGE}_{index}"
    shutil.copytree(
        port_dir, package, ignore=shutil.ignore_patterns("test_*", "__pycache__")
    )
    (package / "__init__.py").touch()
    sys.path.insert(0, str(root))
    loaded = importlib.import_module(f"{package.name}.{module}")
    if not hasattr(loaded, architecture):
        raise LookupError(f"{module}.py defines no class {architecture}")
    return getattr(loaded, architecture)


class _Environment(Exception):
    """The serve environment (its transformers or vLLM) cannot take the config or import the port's HF modules."""


def _parallel_groups() -> None:
    """Tensor, pipeline and expert parallel groups of one, once per process.

    vLLM creates the expert group only when the current config's model has
    experts; made under no model config, it exists for every port built here,
    dense or MoE, as an engine made for each port would have it.
    """
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )

    if model_parallel_is_initialized():
        return
    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"file://{tempfile.mkdtemp()}/rendezvous",
        backend="gloo",
    )
    with set_current_vllm_config(VllmConfig()):
        initialize_model_parallel(1, 1)


def _construct(job: dict, index: int) -> dict:
    from vllm import ModelRegistry
    from vllm.config import (
        set_current_vllm_config,
    )

    try:
        cls = _port_class(job["port_dir"], job["module"], job["architecture"], index)
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("transformers."):
            # construct.construct_ports retries on this wording with a newer transformers.
            raise _Environment(f"this transformers has no {exc.name}") from exc
        raise
    # vLLM's own class for the architecture, if it ships one: the judge of whether this
    # environment can build the family at all (never a port an earlier job registered).
    own = _shipped_models().get(job["architecture"])
    ModelRegistry.register_model(job["architecture"], cls)
    vllm_config = _vllm_config(job["config_dir"])
    with set_current_vllm_config(vllm_config):
        _parallel_groups()
        try:
            model = cls(vllm_config=vllm_config, prefix="")
        except FOREIGN_ERRORS as exc:
            if isinstance(exc, NotImplementedError) and _raised_by_port(exc):
                raise  # the port's own word on what it cannot build, whatever vLLM's does
            why = _hf_model_fails(job)
            if why is not None:
                raise _Environment(
                    f"HF's own {job['architecture']} cannot be built from this "
                    f"config either: {why}"
                ) from exc
            why = _own_class_fails(job, own) if own is not None else None
            if why is not None:
                raise _Environment(
                    f"vLLM's own {job['architecture']} fails here too: {why}"
                ) from exc
            control = _language_fails(job.get("language"))
            if type(control) is type(exc):
                raise _Environment(
                    f"vLLM's {job['language'][0]} fails here alone too, on a tiny "
                    f"config of its own family: {_why(control)}"
                ) from exc
            raise
    towers = sorted(getattr(model, "_tower_model_names", ()) or ())
    with set_current_vllm_config(vllm_config):
        schema = _schema_checks(model, vllm_config)
    return {
        # Per modality the class validates its inputs for: the sizes checked, or the error.
        "schema": schema,
        "parameters": sum(p.numel() for p in model.parameters()),
        "class_file": str(sys.modules[cls.__module__].__file__),
        # What vLLM's _mark_tower_model recorded as the encoder modules.
        "towers": towers,
        # Those built as vLLM's own modules (a class of vLLM's among their bases).
        "vllm_towers": [name for name in towers if _vllms(model, name)],
    }


# The sizes vLLM's own tests/models/multimodal/processing/test_tensor_schema.py feeds
# each class: the worst case the dummy inputs builder gives, and two smaller ones.
SCHEMA_FACTORS = (1.0, 0.5, 0.25)
_PARSE = "_parse_and_validate_"


def _scaled(data, factor: float):
    """A dummy item (an image, a video's frames, an audio) made ``factor`` as large."""
    from PIL import Image

    if isinstance(data, Image.Image):
        width, height = data.size
        return data.resize((max(1, int(width * factor)), max(1, int(height * factor))))
    if isinstance(data, list):
        return [_scaled(item, factor) for item in data]
    if isinstance(data, tuple):  # (video, metadata)
        return (_scaled(data[0], factor), *data[1:])
    shape = getattr(data, "shape", ())
    if len(shape) == 4:  # video frames (frames, height, width, channels)
        frames = [Image.fromarray(frame) for frame in data]
        import numpy as np

        return np.stack([np.asarray(_scaled(f, factor)) for f in frames])
    if len(shape) == 1:  # audio samples
        return data[: max(1, int(len(data) * factor))]
    return data


def _schema_checks(model, vllm_config) -> dict[str, object]:
    """Each ``_parse_and_validate_<modality>_input`` of ``model`` fed vLLM's processor's
    outputs for two items at each of :data:`SCHEMA_FACTORS` of the worst case, batched as
    vLLM's runner batches them: per modality, the factors that validated, or the error."""
    parsers = {
        name[len(_PARSE) : -len("_input")]: getattr(model, name)
        for name in dir(type(model))
        if name.startswith(_PARSE) and name.endswith("_input")
    }
    if not parsers:
        return {}
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.utils import group_and_batch_mm_kwargs

    model_config = vllm_config.model_config
    processor = MULTIMODAL_REGISTRY.create_processor(model_config)
    limits = processor.info.get_supported_mm_limits()
    counts = {m: min(2, limits.get(m) or 2) for m in parsers if m in limits}
    builder = processor.dummy_inputs
    options = model_config.get_multimodal_config().limit_per_prompt
    data = builder.get_dummy_mm_data(model_config.max_model_len, counts, options)
    text = builder.get_dummy_text(counts)
    results: dict[str, object] = {m: [] for m in counts}
    for factor in SCHEMA_FACTORS:
        scaled = {m: _scaled(items, factor) for m, items in data.items()}
        try:
            out = processor(text, processor.info.parse_mm_data(scaled))
        except FOREIGN_ERRORS:
            continue  # the processor's own refusal of a size: no input to validate
        items = [(m, item) for m, its in out["mm_kwargs"].items() for item in its]
        for modality, _, kwargs in group_and_batch_mm_kwargs(items):
            done = results.get(modality)
            if not isinstance(done, list):
                continue
            try:
                if parsers[modality](**kwargs) is None:
                    raise ValueError("no inputs parsed from vLLM's batched kwargs")
            except FOREIGN_ERRORS as exc:
                results[modality] = f"at {factor} of the worst case: {_why(exc)}"
                continue
            done.append(factor)
    return results


_SHIPPED: dict = {}


def _shipped_models() -> dict:
    """vLLM's model registry as vLLM ships it, read before this process registers any port."""
    if not _SHIPPED:
        from vllm import ModelRegistry

        _SHIPPED.update(ModelRegistry.models)
    return _SHIPPED


def _why(exc: BaseException) -> str:
    """``Type: message``; for an error with no message (a bare ``assert``), where it was raised."""
    if str(exc):
        return f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    return f"{type(exc).__name__} at {Path(last.filename).name}:{last.lineno}: {(last.line or '').strip()}"


def _raised_by_port(exc: BaseException) -> bool:
    """Whether the port's own files raised ``exc`` (its last frame is theirs), not code they called."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and f"{os.sep}{_PACKAGE}" in frames[-1].filename


def _vllms(model, name: str) -> bool:
    """Whether ``model``'s module ``name`` is (a subclass of) a module vLLM ships."""
    module = getattr(model, name, None)
    return any(c.__module__.startswith("vllm.") for c in type(module).__mro__)


def _vllm_config(config_dir: str):
    """A fresh ``VllmConfig`` for the twin in ``config_dir`` (each build registers its layers in its own)."""
    from vllm.config import DeviceConfig, LoadConfig, ModelConfig, VllmConfig

    try:
        model_config = ModelConfig(
            model=config_dir, dtype="float32", enforce_eager=True, seed=0
        )
        return VllmConfig(
            model_config=model_config,
            device_config=DeviceConfig("cpu"),
            load_config=LoadConfig(load_format="dummy"),
        )
    except FOREIGN_ERRORS as exc:
        # Before the class is involved: this environment's reading of the config.
        raise _Environment(
            f"vLLM here cannot read the config: {type(exc).__name__}: {exc}"
        ) from exc


def _hf_model_fails(job: dict) -> str | None:
    """Why HF's own model class (transformers' class of the port's name) cannot be built
    from the twin, or None when it builds or transformers has no such class.

    A config HF's own model refuses (a synthetic snapshot's default that leaves a
    per-layer list or a vocabulary map empty) judges no port: the port's HF modules
    and the Transformers backend would read the same missing value.
    """
    import transformers
    from transformers import AutoConfig

    cls = getattr(transformers, job["architecture"], None)
    if cls is None:
        return None
    try:
        cls(AutoConfig.from_pretrained(job["config_dir"]))
    except FOREIGN_ERRORS as exc:
        return _why(exc)
    return None


def _own_class_fails(job: dict, own) -> str | None:
    """Why vLLM's own class for the job's architecture fails on the same twin, or None when it builds."""
    from vllm import ModelRegistry

    architecture = job["architecture"]
    ported = ModelRegistry.models[architecture]
    ModelRegistry.models[architecture] = own
    try:
        failed = _registered_fails(architecture, job["config_dir"])
    finally:
        ModelRegistry.models[architecture] = ported
    return None if failed is None else _why(failed)


def _language_fails(language: list[str] | None) -> BaseException | None:
    """What vLLM's text architecture raises alone on a tiny config of its own family
    (``[architecture, config_dir]``), or None when it builds or there is none to try.

    A text model this environment cannot build at all (kernels vLLM's CPU build
    lacks, a config spelling this vLLM does not read yet) judges no port that
    has vLLM build it. A config this vLLM cannot read alone judges nothing either way.
    """
    if not language:
        return None
    failed = _registered_fails(*language)
    return None if isinstance(failed, _Environment) else failed


def _registered_fails(architecture: str, config_dir: str) -> BaseException | None:
    """What the class vLLM's registry holds for ``architecture`` raises when built from the
    config in ``config_dir`` (an :class:`_Environment` where vLLM cannot read it), or None."""
    from vllm import ModelRegistry
    from vllm.config import set_current_vllm_config

    try:
        vllm_config = _vllm_config(config_dir)
        with set_current_vllm_config(vllm_config):
            ModelRegistry._try_load_model_cls(architecture)(
                vllm_config=vllm_config, prefix=""
            )
    except FOREIGN_ERRORS as exc:
        return exc
    return None


# The share of the machine's memory one construct process may map: a class that asks
# for more (a twin's buffer sized by an untouched position count) fails with an error
# the answer records, instead of the kernel killing the process and the machine's work.
_MEMORY_SHARE = 0.75


def _cap_memory() -> None:
    """Limit this process's address space to ``_MEMORY_SHARE`` of physical memory (where the OS says how much)."""
    try:
        import resource

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ImportError, ValueError, OSError):
        return
    cap = int(total * _MEMORY_SHARE)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def main(request_path: str, answer_path: str) -> None:
    """Build every job's class; each failure is that job's ``{"error": ...}``."""
    request = json.loads(Path(request_path).read_text())
    _cap_memory()
    answer: dict = {"results": {}}
    try:
        import vllm

        answer["vllm_version"] = vllm.__version__
    except BaseException as exc:  # no vLLM here: the caller reports it
        answer["error"] = f"{type(exc).__name__}: {exc}"
    for index, job in enumerate(request["jobs"] if "error" not in answer else []):
        try:
            answer["results"][job["name"]] = _construct(job, index)
        except _Environment as exc:  # not the port's doing
            answer["results"][job["name"]] = {"environment": str(exc)[:2000]}
        except BaseException as exc:  # the answer says what broke
            answer["results"][job["name"]] = {
                "error": f"{type(exc).__name__}: {exc}"[:2000],
                "port_frame": port_frame(exc, _PACKAGE),
            }
        Path(answer_path).write_text(json.dumps(answer))
    Path(answer_path).write_text(json.dumps(answer))
    if os.environ.get("MMPORT_SERVE_DEBUG"):
        print(json.dumps(answer)[:3000], file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
