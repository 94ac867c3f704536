"""Provenance: the line of HF source a fact was read from, and HF code carried with its line."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HelperFunction", "Source"]


@dataclass(frozen=True)
class Source:
    """Where a fact came from: ``models/llava/processing_llava.py:64``."""

    file: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class HelperFunction:
    """An HF function or method transplanted whole into the port.

    ``code`` is the ``def`` as the port holds it: a method of the HF processor
    (or its image processor) becomes a module-level function whose first
    parameter, named ``owner``, takes the place of ``self``.
    """

    name: str
    code: str
    source: Source
    owner: str = ""
    takes_self: bool = False
