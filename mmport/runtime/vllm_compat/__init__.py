"""mmport's bundled stand-in for the multimodal *processing* contract of vLLM 0.33.

A port file written for vLLM 0.33 imports ``vllm.multimodal.processing``,
``vllm.multimodal.inputs`` and friends. When vLLM is not installed, mmport
runs such a file against this package instead: while a port runs under the
bundled backend, ``import vllm.X`` resolves to ``mmport.runtime.vllm_compat.X``
(see :func:`mmport.runtime.vllm_compat._alias.vllm_aliased`).

Only what a processing port touches is here: prompt-update matching and
application, placeholder finding, field-config slicing, the dummy-input path
and vLLM's validation errors. Nothing in it runs a model. It is a clean-room
reimplementation written from vLLM's observable behaviour, not a copy.
"""

__version__ = "0.33.0+mmport.bundled"
__all__ = ["__version__"]
