"""Hashing of multi-modal items (``vllm.multimodal.hasher``), as a port may extend it.

vLLM keys its processor and encoder caches by each item's hash. A port whose
items are processed differently in some prompts (DeepSeek-VL2 tiles an image
only in a prompt of at most two) hashes what changes with the item:
``MultiModalHasher.hash_kwargs(algorithm, mm_hash=..., cropping=...)``. The
digests identify items within one run; they are not vLLM's values.
"""

from __future__ import annotations

import hashlib

__all__ = ["MultiModalHasher"]


class MultiModalHasher:
    """Digests of keyword values, in key order."""

    @classmethod
    def hash_kwargs(cls, algorithm: str, /, **kwargs: object) -> str:
        """One digest of ``kwargs`` (sorted by key) under ``algorithm`` (sha256 where hashlib lacks it)."""
        name = algorithm if algorithm in hashlib.algorithms_available else "sha256"
        hasher = hashlib.new(name)
        for key, value in sorted(kwargs.items()):
            hasher.update(f"{key}={value!r};".encode())
        return hasher.hexdigest()
