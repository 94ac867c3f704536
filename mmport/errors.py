"""One exception hierarchy for mmport.

Every error a user can cause derives from :class:`MmportError`; the CLI turns
it into one red line and exit code 2. Messages say what is wrong *and* what
to do next. The exit codes of every outcome, and which of two is worse, are
here too (:data:`EXIT_CODES`, :func:`worst_exit_code`).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "EXIT_CODES",
    "EXIT_SEVERITY",
    "FOREIGN_ERRORS",
    "AnalysisError",
    "BadReferenceError",
    "DeviceError",
    "ManifestError",
    "MmportError",
    "OutputExistsError",
    "PortLoadError",
    "RemoteCodeConsentError",
    "RenderError",
    "VllmTreeError",
    "one_line",
    "verdict_exit_code",
    "worst_exit_code",
]


# What code mmport runs but did not write may raise: HF's processors, tokenizers,
# models and loaders (their annotations too), a snapshot's remote code, a
# --processor-code module, vLLM, and a port under verification. Such code raises
# whatever its own lines do (ValueError, TypeError, KeyError, IndexError,
# AttributeError, RuntimeError from torch, AssertionError, an exception class of
# its own), so no narrower tuple names every way it refuses. Catch it only where
# that code's failure is itself the fact measured (HF refuses an input, a port
# raises on a probe) or is reported as such (a reference that does not load):
# ``except FOREIGN_ERRORS`` says so at each place. mmport's own calls are caught
# by the errors they raise; tests/test_hygiene.py holds ``except Exception`` out.
FOREIGN_ERRORS: tuple[type[Exception], ...] = (Exception,)


class MmportError(Exception):
    """Base of every error caused by bad input or usage (exit code 2)."""

    exit_code = 2


class BadReferenceError(MmportError):
    """REF is neither a snapshot directory, a reachable hub id nor a model_type."""


class RemoteCodeConsentError(BadReferenceError):
    """The snapshot's own code would have to run, and ``--trust-remote-code`` was not given."""


class AnalysisError(MmportError):
    """The HF source of a model could not be analysed."""


class SideInputsRefusal(AnalysisError):
    """No encoder path: HF hands its text model more of these modalities' features
    than their embeddings (``modalities``), which vLLM's language model does not take."""

    def __init__(self, message: str, modalities: tuple[str, ...]) -> None:
        super().__init__(message)
        self.modalities = modalities


class RenderError(MmportError):
    """A template failed to render (a bug in a template or a PortSpec)."""


class VllmTreeError(MmportError):
    """``--vllm-tree`` names no vLLM source tree, or its registry is not as vLLM writes it."""


class OutputExistsError(MmportError):
    """scaffold would overwrite existing files without --force."""


class PortLoadError(MmportError):
    """A port file failed to import or lacks the classes verify needs."""


class DeviceError(MmportError):
    """A requested device (e.g. CUDA) is not available."""


class ManifestError(MmportError):
    """A ``verify --manifest`` file or directory that does not list ports verify can run."""


# What each exit code of ``mmport verify`` means.
EXIT_CODES = {
    0: "pass",
    1: "fail",  # a parity check failed
    2: "bad input",  # anything wrong with what the user gave (MmportError)
    3: "error",  # an internal error of mmport's own
    4: "cannot judge",  # nothing failed, but the snapshot lacks what some probe needs
}
# Least to most severe, for the worst of many ports: a port that could not be
# judged (4) has shown no fault, so any failed check (1) outranks it; bad input
# (2) and mmport's own error (3) outrank both, as a port that could not be
# verified at all says nothing of its parity.
EXIT_SEVERITY = (0, 4, 1, 2, 3)


def verdict_exit_code(verdict: str) -> int:
    """The exit code of a report's verdict: ``pass`` 0, ``fail`` 1, ``cannot_judge`` 4."""
    return {"pass": 0, "fail": 1, "cannot_judge": 4}[verdict]


def worst_exit_code(codes: Iterable[int]) -> int:
    """The most severe of ``codes`` by :data:`EXIT_SEVERITY` (0 for none): ``worst_exit_code([4, 1]) == 1``."""
    return max(codes, key=EXIT_SEVERITY.index, default=0)


def one_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``, for reports and error lines.

    A first line that ends in a colon introduces what follows (transformers'
    "Validation error for field 'x':" puts the reason on the next line), so the
    next line is kept with it.
    """
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first = lines[0]
    if first.endswith(":") and len(lines) > 1:
        first = f"{first} {lines[1]}"
    return f"{type(exc).__name__}: {first}"
