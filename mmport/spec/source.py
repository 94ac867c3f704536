"""Provenance: the line of HF source a fact was read from."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Source"]


@dataclass(frozen=True)
class Source:
    """Where a fact came from: ``models/llava/processing_llava.py:64``."""

    file: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"
