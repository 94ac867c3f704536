"""Fetch a hub snapshot's config, processor and tokenizer files (weights only when asked)."""

from __future__ import annotations

from pathlib import Path

from mmport.errors import BadReferenceError

__all__ = ["PROCESSING_FILES", "WEIGHT_FILES", "download"]

# Everything processing needs; weights are fetched only on request.
PROCESSING_FILES = [
    "*.json",
    "*.jinja",
    "*.model",
    "*.tiktoken",
    "tokenizer*",
    "*.txt",
    "*.py",
    # The model card: some carry the preprocessing code (InternVL2's dynamic_preprocess).
    "README.md",
]
# Fetched only for `verify --model --weights`.
WEIGHT_FILES = ["*.safetensors", "*.safetensors.index.json"]


def download(repo_id: str, *, weights: bool = False) -> Path:
    """Return the local directory of ``repo_id``'s processing files.

    Uses the huggingface_hub cache, and honours ``HF_HUB_OFFLINE``: offline, a
    repo that is not cached is an error that says how to get it.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        patterns = PROCESSING_FILES + (WEIGHT_FILES if weights else [])
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except HFValidationError as exc:
        raise BadReferenceError(
            f"'{repo_id}' is not a valid hub id ({exc}); use org/name"
        ) from None
    except RepositoryNotFoundError:
        raise BadReferenceError(
            f"hub repo '{repo_id}' does not exist or needs a token (huggingface-cli login)"
        ) from None
    except LocalEntryNotFoundError:
        raise BadReferenceError(
            f"hub repo '{repo_id}' is not in the local cache and the hub cannot be reached "
            "(offline or HF_HUB_OFFLINE=1); download it once online, or pass a local snapshot directory"
        ) from None
    except OSError as exc:
        raise BadReferenceError(
            f"could not fetch hub repo '{repo_id}': {exc}"
        ) from None
