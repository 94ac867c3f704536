"""mmport: port Hugging Face multimodal models to vLLM and prove the port right."""

__version__ = "0.1.0"
__all__ = ["__version__"]
