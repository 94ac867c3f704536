"""The vLLM exception types a processing port can meet (``vllm.exceptions``)."""

from __future__ import annotations

from typing import Any

__all__ = ["VLLMClientError", "VLLMError", "VLLMServerError", "VLLMValidationError"]


class VLLMError(Exception):
    """Root of vLLM's own exceptions."""


class VLLMClientError(VLLMError):
    """An error caused by the request rather than the server."""


class VLLMServerError(VLLMError):
    """An error caused by the server rather than the request."""


class VLLMValidationError(VLLMClientError):
    """A request failed validation; names the offending parameter and value.

    Like vLLM's, it is *not* a ``ValueError``: catch it by this type.
    """

    def __init__(
        self, message: str, *, parameter: str | None = None, value: Any = None
    ) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        extras = [
            f"{name}={val}"
            for name, val in (("parameter", self.parameter), ("value", self.value))
            if val is not None
        ]
        base = super().__str__()
        return f"{base} ({', '.join(extras)})" if extras else base
