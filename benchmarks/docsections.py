"""docs/performance.md's sections, each rewritten by the benchmark that measures it.

Each benchmark owns the ``## `` sections it writes (bench.py also the part
before the first one) and replaces only those, so a rewrite by one keeps
what the others, or a person, last wrote.
"""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"


def split(text: str) -> tuple[str, list[str]]:
    """``text`` as the part before its first ``## `` heading and each section from there."""
    parts = ("\n" + text).split("\n## ")
    head = parts[0][1:]
    return head, ["## " + part.rstrip("\n") + "\n" for part in parts[1:]]


def replace_section(text: str, heading: str, new: str) -> str:
    """``text`` with the section whose heading starts with ``heading`` replaced by ``new``, or ``new`` appended."""
    head, sections = split(text)
    new = new.rstrip("\n") + "\n"
    if any(s.startswith(heading) for s in sections):
        sections = [new if s.startswith(heading) else s for s in sections]
    else:
        sections.append(new)
    return join(head, sections)


def others(text: str, headings: tuple[str, ...]) -> list[str]:
    """The sections of ``text`` whose headings start with none of ``headings``, in order."""
    return [s for s in split(text)[1] if not s.startswith(headings)]


def join(head: str, sections: list[str]) -> str:
    """The document made of ``head`` and ``sections``, one blank line between each."""
    blocks = [b.strip("\n") for b in (head, *sections) if b.strip()]
    return "\n\n".join(blocks) + "\n"


def write_section(heading: str, new: str) -> None:
    """Replace (or append) the section of docs/performance.md headed ``heading``."""
    DOC.write_text(
        replace_section(DOC.read_text() if DOC.exists() else "", heading, new)
    )
