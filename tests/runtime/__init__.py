"""Tests of the port runtime: the bundled vLLM contract and the backend switch."""
