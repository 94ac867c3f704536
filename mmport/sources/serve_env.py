"""Where the serve environment is: a Python with vLLM's CPU build (``MMPORT_SERVE_PYTHON``).

The serve stage runs vLLM's engine there (:mod:`mmport.serve`), and the
analyzers read vLLM's own source from it where this interpreter has no vLLM
(:mod:`mmport.analyzers.vllmsource`), so both find it here.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_SERVE_PYTHON", "serve_python"]

DEFAULT_SERVE_PYTHON = "/opt/mmport-vllm-serve-venv/bin/python"


def serve_python() -> Path | None:
    """The serve environment's python, or None when it is absent."""
    path = Path(os.environ.get("MMPORT_SERVE_PYTHON", DEFAULT_SERVE_PYTHON))
    return path if path.exists() else None
