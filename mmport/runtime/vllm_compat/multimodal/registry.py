"""The multi-modal processor registry of vLLM 0.33 (``MULTIMODAL_REGISTRY``).

A model class is tied to its processing classes by a decorator::

    @MULTIMODAL_REGISTRY.register_processor(
        MyProcessor, info=MyProcessingInfo, dummy_inputs=MyDummyInputsBuilder
    )
    class MyForConditionalGeneration(nn.Module, SupportsMultiModal): ...

The bundled runtime has no model registry to look the class up in, so the
decorator only records the three factories on the class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["MultiModalRegistry", "ProcessorFactories"]

logger = logging.getLogger(__name__)

_M = TypeVar("_M", bound=type)


@dataclass(frozen=True)
class ProcessorFactories:
    """The three factories registered for a model class."""

    info: Callable[[Any], Any]
    processor: Callable[[Any, Any], Any]
    dummy_inputs: Callable[[Any], Any]

    def build_processor(self, ctx: Any) -> Any:
        """Build info, then the dummy-inputs builder, then the processor, from ``ctx``."""
        info = self.info(ctx)
        return self.processor(info, self.dummy_inputs(info))


class MultiModalRegistry:
    """Ties model classes to the classes that process their multi-modal inputs."""

    def register_processor(
        self,
        processor: Callable[[Any, Any], Any],
        *,
        info: Callable[[Any], Any],
        dummy_inputs: Callable[[Any], Any],
    ) -> Callable[[_M], _M]:
        """A class decorator recording the factories as ``model_cls._processor_factory``."""

        def wrapper(model_cls: _M) -> _M:
            if "_processor_factory" in model_cls.__dict__:
                logger.warning(
                    "%s already has a multi-modal processor registered; replacing it.",
                    model_cls,
                )
            model_cls._processor_factory = ProcessorFactories(  # type: ignore[attr-defined]
                info=info, processor=processor, dummy_inputs=dummy_inputs
            )
            return model_cls

        return wrapper
