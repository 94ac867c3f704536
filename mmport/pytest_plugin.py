"""mmport's pytest plugin: one test item per port and check of a ``[tool.mmport]`` manifest.

Registered through the ``pytest11`` entry point, so every pytest run in an
environment with mmport installed loads this module. It therefore imports
nothing but pytest and the standard library, and does nothing unless a
manifest is configured: ``--mmport-manifest PATH``, or a ``[tool.mmport]``
table in the rootdir's ``pyproject.toml``. With one, pytest collects::

    pyproject.toml::ports/llava/llava_processing.py::tokens
    pyproject.toml::ports/llava/llava_processing.py::placeholders
    ...

and ``-k``, ``-x``, ``--lf``, ``--junitxml`` and pytest-xdist's ``-n`` work
on them as on any test (:mod:`mmport.testing` holds the collectors).
``--mmport-shard K/N`` keeps the K-th of N shards of the ports (docs/ci.md).
``mmport verify --manifest`` runs the same plugin (:mod:`mmport.testing.run`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

__all__ = ["find_manifest", "pytest_addoption", "pytest_configure"]

# Where a recorded duration per port is read from (and written to with --mmport-store-durations).
DEFAULT_DURATIONS = ".mmport_durations.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``mmport`` option group (cheap: options only, nothing is imported)."""
    group = parser.getgroup(
        "mmport", "mmport: verify the ports of a [tool.mmport] manifest"
    )
    group.addoption(
        "--mmport-manifest",
        metavar="PATH",
        help="A pyproject.toml with a [tool.mmport] table, or a directory of generated ports.",
    )
    group.addoption(
        "--mmport-shard",
        metavar="K/N",
        help="Run only the K-th of N shards of the manifest's ports (1 <= K <= N).",
    )
    group.addoption(
        "--mmport-probes",
        type=int,
        default=8,
        metavar="N",
        help="Seeded probe cases per port (default 8).",
    )
    group.addoption(
        "--mmport-seed", type=int, default=0, help="Seed for the probes (default 0)."
    )
    group.addoption(
        "--mmport-settings",
        type=int,
        default=3,
        metavar="N",
        help="Request settings drawn per modality (default 3; 0: defaults only).",
    )
    group.addoption(
        "--mmport-backend",
        default="auto",
        help="auto (real vLLM when importable), vllm or bundled.",
    )
    _add_run_options(group)
    parser.addini(
        "mmport_durations",
        f"Per-port durations file that balances --mmport-shard (default {DEFAULT_DURATIONS}).",
        default=DEFAULT_DURATIONS,
    )


def _add_run_options(group: pytest.OptionGroup) -> None:
    """Options on what a run writes and how its workers end."""
    group.addoption(
        "--mmport-html",
        metavar="DIR",
        help="Write each port's HTML report, and index.html linking them, into DIR.",
    )
    group.addoption(
        "--mmport-durations",
        metavar="PATH",
        help=f"Per-port durations that balance shards (default: {DEFAULT_DURATIONS} in the rootdir).",
    )
    group.addoption(
        "--mmport-store-durations",
        action="store_true",
        help="Write this run's per-port durations into the durations file.",
    )
    group.addoption(
        "--mmport-full-exit",
        action="store_true",
        help="Let each xdist worker's interpreter shut down in full (for a plugin that writes at exit); "
        "by default a worker ends as soon as pytest is done with it.",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the manifest's collectors when a manifest is configured; otherwise do nothing at all."""
    manifest = find_manifest(config)
    if manifest is None:
        if config.getoption("mmport_shard"):
            raise pytest.UsageError(
                "--mmport-shard needs a manifest: add a [tool.mmport] table to pyproject.toml, or pass --mmport-manifest PATH"
            )
        return
    from mmport.testing.plugin import ManifestPlugin

    config.pluginmanager.register(ManifestPlugin(config, manifest), ManifestPlugin.NAME)


def find_manifest(config: pytest.Config) -> Path | None:
    """The manifest this run verifies: ``--mmport-manifest``, else the rootdir's pyproject.toml if it has ``[tool.mmport]``."""
    given = config.getoption("mmport_manifest")
    if given:
        return (config.invocation_params.dir / given).resolve()
    pyproject = config.rootpath / "pyproject.toml"
    return pyproject.resolve() if _has_mmport_table(pyproject) else None


def _has_mmport_table(pyproject: Path) -> bool:
    """Whether ``pyproject`` exists and holds a ``[tool.mmport]`` table (a broken file is pytest's to report, not ours)."""
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data.get("tool"), dict) and "mmport" in data["tool"]
