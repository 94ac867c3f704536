"""The analyzers' worked examples, one test each, generated from the ``EXAMPLES`` beside every rule.

The modules are found by walking ``mmport.analyzers``, not listed by hand: a
new analyzer module without examples fails :func:`test_every_analyzer_module_has_examples`.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import mmport.analyzers
from mmport.analyzers.examples import Example, load


def _modules() -> list[str]:
    """Every module of the analyzers package (the package's own ``__init__`` runs them, it holds no rule)."""
    return sorted(
        f"mmport.analyzers.{info.name}"
        for info in pkgutil.iter_modules(mmport.analyzers.__path__)
    )


def _examples() -> list[tuple[str, Example]]:
    return [
        (name, example)
        for name in _modules()
        for example in getattr(importlib.import_module(name), "EXAMPLES", [])
    ]


def test_every_analyzer_module_has_examples() -> None:
    missing = [
        name
        for name in _modules()
        if not getattr(importlib.import_module(name), "EXAMPLES", None)
    ]
    assert not missing, f"analyzer modules without EXAMPLES: {missing}"


def test_example_names_are_unique_per_module() -> None:
    names = [(module, example.name) for module, example in _examples()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("module", "example"),
    [
        pytest.param(
            module,
            example,
            id=f"{module.rsplit('.', 1)[1]}:{'VALID' if example.is_valid else 'INVALID'}:{example.name}",
        )
        for module, example in _examples()
    ],
)
def test_example(module: str, example: Example, tmp_path) -> None:
    snippet = load(example.code, tmp_path)
    if example.refusal is not None:
        with pytest.raises(example.refusal, match=example.match or None):
            example.run(snippet)
        return
    assert example.run(snippet) == example.expected
