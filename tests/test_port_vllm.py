"""``verify REF --port vllm``: the processor vLLM itself registers, through the same checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import invoke


def test_port_vllm_needs_a_real_vllm():
    result = invoke("verify", "llava", "--port", "vllm", "--backend", "bundled")
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stderr.strip()
    assert "--port vllm" in said and len(said.splitlines()) == 1


@pytest.mark.vllm
def test_vllms_own_llava_port_runs_through_every_processing_check():
    from mmport.verify import verify_port

    report = verify_port("llava", Path("vllm"), probes=4, backend="vllm", settings_per_modality=0)
    assert report.backend.startswith("vllm")
    for name in ("tokens", "placeholders", "fields", "cache", "dummy", "limits"):
        assert report.checks[name].runs > 0, f"{name} compared nothing against vLLM's own port"


@pytest.mark.vllm
def test_an_architecture_vllm_does_not_register_is_one_line():
    from mmport.errors import PortLoadError
    from mmport.runtime.backends import select_backend
    from mmport.sources import resolve

    snapshot = resolve("fuyu")
    architectures = snapshot.config_dict.get("architectures") or []
    from vllm import ModelRegistry

    if set(architectures) & set(ModelRegistry.get_supported_archs()):
        pytest.skip(f"this vLLM registers {architectures}")
    with pytest.raises(PortLoadError, match="registers no model for"):
        select_backend("vllm").load_registered(snapshot.path)
