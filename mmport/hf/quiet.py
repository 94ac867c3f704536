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
    import logging as std_logging

    from transformers.utils import logging

    from mmport.hf.code import REMOTE_CODE_PACKAGE

    previous = logging.get_verbosity()
    logging.set_verbosity_error()
    # A snapshot's own modules log under HF's package for remote code, not under transformers.
    remote = std_logging.getLogger(REMOTE_CODE_PACKAGE)
    remote_level = remote.level
    remote.setLevel(std_logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(previous)
        remote.setLevel(remote_level)
