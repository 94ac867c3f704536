"""The serve environment's side of ``benchmarks/serve.py``: one engine, timed.

Run by the serve environment's python, never imported by mmport::

    python _serve_engine.py request.json answer.json

The request is ``mmport/serve/_engine.py``'s (checkpoint, ``port_dir`` or
null for vLLM's own class, prompts with their item files) plus ``"warmup":
N``, the number of prompts run once before the timed pass. The answer holds
the timed passes (``"passes": N``, default 1): ``seconds`` (the median
wall time of one ``LLM.generate`` over every prompt), ``ttft`` (each request's time to first token, from vLLM's request
stats), ``encoder_seconds`` and ``encoder_items`` (time spent in the model's
``embed_multimodal`` and the items it returned), or ``{"error": ...}``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

# _engine.py (the port's registration, the items as vLLM's loaders give them)
# lies in mmport/serve; it needs only the standard library, vLLM and PIL.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mmport" / "serve"))
import _engine


def _time_encoder(model) -> None:
    """Wrap the model's ``embed_multimodal`` so it adds its time and items to the model."""
    inner = model.embed_multimodal
    model._bench_encoder = [0.0, 0]

    def timed(**kwargs):
        started = time.perf_counter()
        out = inner(**kwargs)
        model._bench_encoder[0] += time.perf_counter() - started
        model._bench_encoder[1] += len(out)
        return out

    model.embed_multimodal = timed


def _encoder_totals(llm, reset: bool = False) -> tuple[float, int]:
    """Time and items the encoder took since the last reset, summed over workers."""

    def read(model):
        totals = tuple(model._bench_encoder)
        if reset:
            model._bench_encoder[:] = [0.0, 0]
        return totals

    per_worker = llm.apply_model(read)
    return (
        sum(seconds for seconds, _ in per_worker),
        sum(items for _, items in per_worker),
    )


def run(request: dict) -> dict:
    """Start the engine, warm it up, time one pass over every prompt."""
    from vllm import SamplingParams

    if request.get("port_dir"):
        _engine._register_port(request["port_dir"], request["module"])
    llm, items = _engine.start_engine(
        request,
        # vLLM's own class, or its Transformers backend (HF's modeling code).
        model_impl=request.get("model_impl", "auto"),
        disable_log_stats=False,
        # Every request is timed as the engine sees it, not served from the cache.
        mm_processor_cache_gb=0,
        enable_prefix_caching=False,
    )
    llm.apply_model(_time_encoder)
    params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"])
    inputs = [
        {"prompt": probe["prompt"], "multi_modal_data": data}
        for probe, data in zip(request["prompts"], items, strict=True)
    ]
    llm.generate(inputs[: request.get("warmup", 1)], params, use_tqdm=False)
    _encoder_totals(llm, reset=True)
    # Several timed passes, the median kept: one pass over a few requests takes
    # a second or two, which a scheduler hiccup on a shared machine doubles.
    seconds, ttft = [], []
    for _ in range(request.get("passes", 1)):
        started = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False)
        seconds.append(time.perf_counter() - started)
        ttft += [
            o.metrics.first_token_latency
            for o in outputs
            if getattr(o, "metrics", None) is not None
        ]
    encoder_seconds, encoder_items = _encoder_totals(llm)
    return {
        "seconds": statistics.median(seconds),
        "requests": len(outputs),
        "generated": sum(len(o.outputs[0].token_ids) for o in outputs),
        "ttft": ttft,
        "encoder_seconds": encoder_seconds,
        "encoder_items": encoder_items,
    }


def main(request_path: str, answer_path: str) -> None:
    """Run one request, write one answer; a failure becomes ``{"error": ...}``."""
    request = json.loads(Path(request_path).read_text())
    try:
        answer = run(request)
    except BaseException as exc:  # the benchmark reports what broke and goes on
        answer = {
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=-8),
        }
    Path(answer_path).write_text(json.dumps(answer))


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    main(sys.argv[1], sys.argv[2])
