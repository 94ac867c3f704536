"""Resolve a model reference (directory, hub id or model_type) to a Snapshot."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from mmport import __version__
from mmport.errors import BadReferenceError
from mmport.sources.snapshot import Snapshot, read_config_json

__all__ = ["Snapshot", "cache_root", "publish_snapshot", "resolve"]


def cache_root() -> Path:
    """Where synthetic snapshots are kept (``$MMPORT_CACHE`` or ~/.cache/mmport)."""
    return Path(os.environ.get("MMPORT_CACHE") or Path.home() / ".cache" / "mmport")


def _looks_like_path(ref: str) -> bool:
    return (
        ref.startswith((".", "/", "~"))
        or ref.endswith("/")
        or (os.sep in ref and Path(ref).parent.exists())
    )


def _local(ref: str, trust_remote_code: bool = False) -> Snapshot:
    path = Path(ref).expanduser()
    if not path.is_dir():
        raise BadReferenceError(
            f"'{ref}' is not a directory; pass a model snapshot directory, a hub id or a model_type"
        )
    if not (path / "config.json").is_file():
        raise BadReferenceError(
            f"'{ref}' has no config.json; point at the directory that holds the model's config and processor files"
        )
    model_type = read_config_json(path).get("model_type")
    if not model_type or not isinstance(model_type, str):
        raise BadReferenceError(
            f"'{path / 'config.json'}' names no model_type; is it a transformers config?"
        )
    return Snapshot(
        ref=ref,
        path=path.resolve(),
        origin="local",
        model_type=model_type,
        trust_remote_code=trust_remote_code,
    )


def publish_snapshot(staging: Path, target: Path) -> None:
    """Put the snapshot built in ``staging`` at ``target``, unless another process put
    a whole one there first: that one stays, as a process may be reading it.

    A rename onto a directory that holds files fails, so of two processes
    building the same snapshot at once (``pytest -n 2``, ``verify --manifest``
    workers) the first to finish wins and the other's build is dropped; only a
    ``target`` without a config (an empty or broken directory) is replaced.
    """
    try:
        staging.rename(target)
    except OSError:
        if (target / "config.json").is_file():
            return
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)


def _synthetic(model_type: str) -> Snapshot:
    """Build (once) and return the synthetic snapshot of ``model_type``."""
    import transformers

    from mmport.sources.fingerprint import builder_fingerprint
    from mmport.sources.synthetic import build_synthetic

    # Any edit to the code that builds or measures a snapshot rebuilds it; so does
    # another transformers, or torchvision coming or going (it picks the image processor).
    backend = "tv" if importlib.util.find_spec("torchvision") else "pil"
    version = f"mmport-{__version__}-{builder_fingerprint()}-transformers-{transformers.__version__}-{backend}"
    target = cache_root() / "synthetic" / version / model_type
    if not (target / "config.json").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        # Build beside the target and rename, so a crash never leaves half a snapshot.
        staging = Path(tempfile.mkdtemp(prefix=f".{model_type}-", dir=target.parent))
        try:
            build_synthetic(model_type, staging)
            publish_snapshot(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return Snapshot(
        ref=model_type, path=target, origin="synthetic", model_type=model_type
    )


def resolve(
    ref: str,
    *,
    weights: bool = False,
    trust_remote_code: bool = False,
    processor_code: Path | None = None,
) -> Snapshot:
    """Resolve ``ref``: an existing directory, a hub id ``org/name``, or a model_type.

    ``weights`` also fetches a hub snapshot's weights (``verify --model --weights``).
    ``trust_remote_code`` lets transformers run the code a snapshot ships
    (``auto_map``); without it nothing from the snapshot is ever imported.
    ``processor_code`` is a directory or package holding the processor class
    when the snapshot does not ship it (:mod:`mmport.sources.processor_code`):
    found here by reading, run only under ``trust_remote_code``.

    Raises :class:`BadReferenceError` with a one-line message saying what to do
    when the reference cannot be resolved.
    """
    snapshot = _resolve(ref, weights, trust_remote_code)
    if processor_code is None:
        return snapshot
    from mmport.sources.processor_code import find_processor_code

    found = find_processor_code(processor_code, snapshot.path)
    # The consent asked of a snapshot's code is asked of PATH's too, whatever the snapshot ships.
    return dataclasses.replace(
        snapshot, processor_code=found, trust_remote_code=trust_remote_code, _cache={}
    )


def _resolve(ref: str, weights: bool, trust_remote_code: bool) -> Snapshot:
    if Path(ref).expanduser().exists() or _looks_like_path(ref):
        return _local(ref, trust_remote_code)
    if "/" in ref:
        from mmport.sources.hub import download

        return _local_from_hub(ref, download(ref, weights=weights), trust_remote_code)
    from mmport.sources.synthetic import processor_class_for

    processor_class_for(ref)  # unknown model_types fail here, before any work
    return _synthetic(ref)


def _local_from_hub(ref: str, path: Path, trust_remote_code: bool) -> Snapshot:
    snapshot = _local(str(path))
    return Snapshot(
        ref=ref,
        path=snapshot.path,
        origin="hub",
        model_type=snapshot.model_type,
        trust_remote_code=trust_remote_code,
    )
