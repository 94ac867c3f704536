"""Snapshots built from a checkpoint's published processing files (``tests/data/published``).

Each directory there holds a checkpoint's config, remote ``.py`` files,
processor and tokenizer configs, copied as published, and a tokenizer derived
from its real vocabulary; its ``PROVENANCE.md`` says which file is which and
where it came from. No weights.
"""

from __future__ import annotations

import shutil
from pathlib import Path

PUBLISHED = Path(__file__).resolve().parent / "data" / "published"

__all__ = ["PUBLISHED", "published_snapshot"]


def published_snapshot(name: str, directory: Path) -> Path:
    """Materialise the published files of checkpoint ``name`` as a snapshot directory (its provenance note left out)."""
    shutil.copytree(
        PUBLISHED / name, directory, ignore=shutil.ignore_patterns("PROVENANCE.md")
    )
    return directory
