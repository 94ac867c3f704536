"""Probes are inputs vLLM would hand a port: audio within what HF's feature extractor keeps."""

from __future__ import annotations

from mmport.sources import resolve
from mmport.verify.probes import AUDIO_SECONDS, make_probes
from mmport.verify.reference import HFReference


def test_audio_probes_stay_within_the_window_a_whisper_style_extractor_keeps() -> None:
    hf = HFReference(resolve("qwen2_audio"))
    extractor = hf.processor.feature_extractor
    window = extractor.n_samples / extractor.sampling_rate
    assert hf.kept_audio_seconds() == window
    assert (
        max(AUDIO_SECONDS) > window
    )  # without the cap, some probe would pass the window
    probes = make_probes(
        40, 0, limits={"audio": 3}, audio_seconds=hf.kept_audio_seconds()
    )
    lengths = [item.seconds for probe in probes for item in probe.items]
    assert lengths and max(lengths) <= window
    uncapped = [
        item.seconds
        for probe in make_probes(40, 0, limits={"audio": 3})
        for item in probe.items
    ]
    assert max(uncapped) > window


def test_an_image_only_reference_keeps_no_audio_window() -> None:
    assert HFReference(resolve("llava")).kept_audio_seconds() is None
