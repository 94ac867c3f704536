"""Silence transformers' advisory logging while mmport drives it."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

__all__ = ["quiet_transformers"]


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Lower transformers' log level to errors for the duration of the block.

    Processors warn on every call about things a synthetic or probe input does
    on purpose (no text prefix, slow image processors); those lines would
    drown mmport's own report.
    """
    from transformers.utils import logging

    previous = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(previous)
