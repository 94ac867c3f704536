"""One exception hierarchy for mmport.

Every error a user can cause derives from :class:`MmportError`; the CLI turns
it into one red line and exit code 2. Messages say what is wrong *and* what
to do next.
"""

from __future__ import annotations

__all__ = [
    "one_line",
    "AnalysisError",
    "BadReferenceError",
    "DeviceError",
    "ManifestError",
    "MmportError",
    "OutputExistsError",
    "PortLoadError",
    "RemoteCodeConsentError",
    "RenderError",
]


class MmportError(Exception):
    """Base of every error caused by bad input or usage (exit code 2)."""

    exit_code = 2


class BadReferenceError(MmportError):
    """REF is neither a snapshot directory, a reachable hub id nor a model_type."""


class RemoteCodeConsentError(BadReferenceError):
    """The snapshot's own code would have to run, and ``--trust-remote-code`` was not given."""


class AnalysisError(MmportError):
    """The HF source of a model could not be analysed."""


class RenderError(MmportError):
    """A template failed to render (a bug in a template or a PortSpec)."""


class OutputExistsError(MmportError):
    """scaffold would overwrite existing files without --force."""


class PortLoadError(MmportError):
    """A port file failed to import or lacks the classes verify needs."""


class DeviceError(MmportError):
    """A requested device (e.g. CUDA) is not available."""


class ManifestError(MmportError):
    """A ``verify --manifest`` file or directory that does not list ports verify can run."""


def one_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``, for reports and error lines."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
