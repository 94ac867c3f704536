"""``verify --serve``: the whole port served in a real vLLM engine gives HF's greedy tokens.

The steps, for each checkpoint layout (``saved``, ``hub``; see
:mod:`mmport.serve.checkpoint`), or once for the snapshot's own checkpoint
(``--weights``):

1. write a servable tiny twin checkpoint of the snapshot (seeded random init);
2. HF ``generate`` greedily on two probe prompts with an image each;
3. in the serve environment (``MMPORT_SERVE_PYTHON``, default
   ``/opt/mmport-vllm-serve-venv/bin/python``), a vLLM engine with the port's
   model class registered generates on the same prompts
   (``SamplingParams(temperature=0, logprobs=1)``), a subprocess speaking JSON
   (:mod:`mmport.serve._engine`);
4. the port passes when its prompt ids and generated tokens equal HF's and
   the first step's logprob of the chosen token is allclose to HF's. When the
   engine's attention backend cannot attend both ways over media positions
   that the model attends to both ways (vLLM's mm-prefix mode, missing from
   the CPU backend; Gemma 3), HF is run attending causally too.

The control, vLLM's own class for the architecture on the same checkpoint,
runs too when vLLM has one: a failure it shares is the harness's or the
checkpoint's, not the port's, and the report says so.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmport.errors import FOREIGN_ERRORS
from mmport.serve.checkpoint import Layout, TwinCheckpoint
from mmport.sources.serve_env import DEFAULT_SERVE_PYTHON, serve_python

__all__ = ["Layout", "ServeOptions", "check_serve", "run_engine", "serve_python"]

# First-step logprobs of float32 HF vs vLLM's CPU kernels (measured: < 1e-5 apart).
LOGPROB_ATOL = 1e-3
# An item's embeddings in float32 against HF's features, relative to their largest
# value: vLLM's fused layers and attention kernels reorder sums (measured on LLaVA's
# twin: 3.7e-8 apart at a largest value of 0.06; 1% off is 6e-4).
FEATURE_RTOL = 1e-3
FEATURE_ATOL = 1e-6
_ENGINE = Path(__file__).with_name("_engine.py")


@dataclass(frozen=True)
class ServeOptions:
    """How ``verify --serve`` runs."""

    layouts: tuple[Layout, ...] = (Layout.SAVED, Layout.HUB)
    max_tokens: int = 4
    max_model_len: int = 2048
    control: bool = True
    timeout_s: int = 600
    # Serve the snapshot's own checkpoint (``--weights``) instead of tiny twins.
    weights: bool = False
    # Tensor-parallel ranks the engine runs the model on.
    tensor_parallel: int = 1


def run_engine(
    python: Path,
    request: dict,
    workdir: Path,
    timeout_s: int,
    script: Path = _ENGINE,
    extra_env: dict[str, str] | None = None,
) -> dict:
    """One run of ``script`` in the serve environment; a crash or timeout becomes ``{"error": ...}``.

    ``extra_env`` adds to (or overrides) this process's environment for the run.
    """
    request_path, answer_path = workdir / "request.json", workdir / "answer.json"
    request_path.write_text(json.dumps(request))
    answer_path.unlink(missing_ok=True)
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        **(extra_env or {}),
    }
    try:
        done = subprocess.run(
            [str(python), str(script), str(request_path), str(answer_path)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            cwd=workdir,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the engine did not answer within {timeout_s} s"}
    if not answer_path.exists():
        return {
            "error": f"the engine exited {done.returncode} without an answer: {done.stderr.strip()[-800:]}"
        }
    # An answer written before the process ended early is partial: its exit code says so.
    return {**json.loads(answer_path.read_text()), "exit_code": done.returncode}


def _short(error: str, limit: int = 300) -> str:
    """An engine error's first sentence (vLLM's loader lists every parameter after it)."""
    first = error.split(". The available", 1)[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _compare(probe: str, hf: Any, served: dict, label: str) -> list:
    """Failures of one probe: prompt ids, generated tokens, first-step logprob."""
    from mmport.verify.report import Failure

    if tuple(served["prompt_ids"]) != hf.prompt_ids:
        at = next(
            (
                i
                for i, (a, b) in enumerate(
                    zip(hf.prompt_ids, served["prompt_ids"], strict=False)
                )
                if a != b
            ),
            None,
        )
        return [
            Failure(
                probe,
                f"{label}: the engine's prompt ids differ from HF's ({len(hf.prompt_ids)} vs "
                f"{len(served['prompt_ids'])} ids)",
                at,
                loudness="silent",
            )
        ]
    if tuple(served["tokens"]) != hf.tokens:
        at = next(
            (
                i
                for i, (a, b) in enumerate(
                    zip(hf.tokens, served["tokens"], strict=False)
                )
                if a != b
            ),
            min(len(hf.tokens), len(served["tokens"])),
        )
        return [
            Failure(
                probe,
                f"{label}: greedy tokens differ from HF generate's",
                at,
                str(list(hf.tokens)),
                str(served["tokens"]),
                loudness="silent",
            )
        ]
    if hf.first_logprob is not None and not math.isclose(
        hf.first_logprob, served["first_logprob"], abs_tol=LOGPROB_ATOL
    ):
        return [
            Failure(
                probe,
                f"{label}: first-step logprob of the chosen token differs (atol {LOGPROB_ATOL})",
                0,
                f"{hf.first_logprob:.6f}",
                f"{served['first_logprob']:.6f}",
                loudness="silent",
            )
        ]
    return []


def _model_len(reference: list, options: ServeOptions) -> int:
    """The engine's ``max_model_len``: the option, or more when HF's longest prompt needs it (Idefics3 tiles)."""
    needed = max(len(h.prompt_ids) for h in reference) + options.max_tokens
    return max(options.max_model_len, -(-needed // 256) * 256)


def _engine_request(
    checkpoint: Any,
    probes: list,
    port: Path,
    options: ServeOptions,
    workdir: Path,
    model_len: int,
) -> dict:
    """The JSON request :mod:`mmport.serve._engine` reads (see its docstring)."""
    return {
        "workdir": str(workdir),
        "checkpoint": str(checkpoint.path),
        "port_dir": str(port.parent),
        "module": port.stem,
        "architecture": checkpoint.architecture,
        "max_tokens": options.max_tokens,
        "max_model_len": model_len,
        "tensor_parallel_size": options.tensor_parallel,
        # The class's embeddings per item, compared with HF's features (_features).
        "features": True,
        "prompts": [
            {
                "prompt": p.prompt,
                "images": list(p.images),
                "videos": [list(video) for video in p.videos],
                "audios": [[path, p.sampling_rate] for path in p.audios],
            }
            for p in probes
        ],
    }


def _control(
    python: Path,
    request: dict,
    probes: list,
    reference: list,
    label: str,
    timeout_s: int,
) -> tuple[str, bool]:
    """vLLM's own class on the same checkpoint and prompts: (a note, whether it failed to start)."""
    control = run_engine(
        python,
        {**request, "port_dir": None, "module": None, "features": False},
        Path(request["workdir"]),
        timeout_s,
    )
    if "error" in control:
        return (
            f"{label}: vLLM's own {request['architecture']} fails: {_short(control['error'])}",
            True,
        )
    failures = [
        f
        for p, h, s in zip(probes, reference, control["outputs"], strict=False)
        for f in _compare(p.name, h, s, label)
    ]
    said = f"fails: {failures[0].describe()}" if failures else "gives HF's tokens"
    return f"{label}: vLLM's own {request['architecture']} {said}", False


def _serve_layout(
    snapshot: Any,
    model_file: Path,
    layout: Layout | None,
    options: ServeOptions,
    python: Path,
    workdir: Path,
    seed: int,
) -> tuple[list, list[str], dict[str, float]]:
    """Failures, notes and metrics of one layout (``None``: the snapshot's own checkpoint)."""
    from mmport.serve.reference import hf_generate, make_serve_probes
    from mmport.verify.reference import HFReference
    from mmport.verify.report import Failure

    checkpoint, label, key = _layout_checkpoint(snapshot, layout, workdir, seed)
    reference_side = HFReference(snapshot)
    probes = make_serve_probes(
        reference_side.placeholders(),
        workdir,
        seed,
        sampling_rate=reference_side.sampling_rate,
    )
    reference = hf_generate(checkpoint.path, probes, options.max_tokens)
    request = _engine_request(
        checkpoint, probes, model_file, options, workdir, _model_len(reference, options)
    )
    answer = run_engine(python, request, workdir, options.timeout_s)
    notes, control_broke = [], False
    if answer.get("mm_prefix_dropped"):
        # The engine attended causally over media the model attends to both ways:
        # HF is asked to do the same, so the comparison stays exact.
        reference = hf_generate(
            checkpoint.path, probes, options.max_tokens, causal=True
        )
        notes.append(
            f"{label}: this engine's attention backend has no bidirectional media attention "
            "(vLLM's mm-prefix mode); compared with HF attending causally (no token_type_ids)"
        )
    if options.control:
        note, control_broke = _control(
            python, request, probes, reference, label, options.timeout_s
        )
        notes.append(note)
    if "error" in answer:
        shared = " (vLLM's own class fails too)" if control_broke else ""
        where = f" (at {answer['port_frame']})" if answer.get("port_frame") else ""
        return (
            [
                Failure(
                    probes[0].name,
                    f"{label}: the port did not serve{shared}: {_short(answer['error'])}{where}",
                    loudness="loud",
                )
            ],
            notes,
            {},
        )
    failures, metrics, note = _served(probes, reference, answer, label, key, options)
    return failures, [*notes, note], metrics


def _layout_checkpoint(
    snapshot: Any, layout: Layout | None, workdir: Path, seed: int
) -> tuple[TwinCheckpoint, str, str]:
    """The checkpoint a layout serves (``None``: the snapshot's own), its label in notes, its metric's key."""
    from mmport.serve.checkpoint import build_checkpoint, snapshot_checkpoint

    if layout is None:
        return snapshot_checkpoint(snapshot), "snapshot weights", "weights"
    checkpoint = build_checkpoint(
        snapshot, workdir / f"twin-{layout.value}", layout=layout, seed=seed
    )
    return checkpoint, f"{layout.value} layout", layout.value


def _served(
    probes: list,
    reference: list,
    answer: dict,
    label: str,
    key: str,
    options: ServeOptions,
) -> tuple[list, dict[str, float], str]:
    """The engine's answers against HF's: the failures, the largest first-step logprob gap, and a note."""
    outputs = answer["outputs"]
    failures = [
        f
        for p, h, s in zip(probes, reference, outputs, strict=False)
        for f in _compare(p.name, h, s, label)
    ]
    gaps = [
        abs(h.first_logprob - s["first_logprob"])
        for h, s in zip(reference, outputs, strict=False)
        if h.first_logprob is not None
    ]
    compared = sum(len(h.tokens) for h in reference)
    ranks = (
        f", {options.tensor_parallel} tensor-parallel ranks"
        if options.tensor_parallel > 1
        else ""
    )
    note = f"{label}: {len(probes)} prompts, {compared} greedy tokens compared (vLLM {answer['vllm_version']}{ranks})"
    metrics = {f"{key}_max_logprob_gap": max(gaps, default=0.0)}
    feature_failures, diff, said = _features(probes, reference, answer, label)
    if diff is not None:
        metrics[f"{key}_max_feature_diff"] = diff
    return [*failures, *feature_failures], metrics, f"{note}; {said}"


def _features(
    probes: list, reference: list, answer: dict, label: str
) -> tuple[list, float | None, str]:
    """Each item's rows the class embedded against HF's ``get_<modality>_features``
    on the same checkpoint: failures, the largest difference, and what was compared."""
    import torch

    from mmport.verify.report import Failure

    if not answer.get("features_file"):
        return [], None, "no embeddings kept by the engine"
    served = torch.load(answer["features_file"])
    items = [p.counts for p in probes]
    if len(served) != sum(sum(c.values()) for c in items):
        return [], None, f"the engine embedded {len(served)} items; not compared"
    failures, diffs, at = [], [], 0
    for probe, hf, counts in zip(probes, reference, items, strict=True):
        mine, at = served[at : at + sum(counts.values())], at + sum(counts.values())
        if hf.features is None:
            continue
        for index, (theirs, ours) in enumerate(zip(hf.features, mine, strict=True)):
            if theirs.shape != ours.shape:
                message = (
                    f"{label}: item {index}'s embeddings vs HF's features (rows, width)"
                )
                failures.append(
                    Failure(
                        probe.name,
                        message,
                        None,
                        str(tuple(theirs.shape)),
                        str(tuple(ours.shape)),
                        loudness="loud",
                    )
                )
                continue
            diff = float((theirs - ours).abs().max()) if theirs.numel() else 0.0
            diffs.append(diff)
            scale = float(theirs.abs().max()) if theirs.numel() else 0.0
            if diff > FEATURE_RTOL * scale + FEATURE_ATOL:
                failures.append(
                    Failure(
                        probe.name,
                        f"{label}: item {index}'s embeddings differ from HF's features (max |Δ| {diff:.3g}, "
                        f"tolerance {FEATURE_RTOL:g} × their largest {scale:.3g})",
                        loudness="silent",
                    )
                )
    if not diffs and not failures:
        return [], None, "HF's model has no get_<modality>_features: tokens alone"
    sources = ", ".join(dict.fromkeys(h.features_from for h in reference if h.features))
    return (
        failures,
        max(diffs, default=None),
        f"{len(diffs)} items' embeddings (the class's embed_multimodal) against HF's "
        f"{sources}, max |Δ| {max(diffs, default=0.0):.2g}",
    )


def check_serve(
    snapshot: Any,
    port_file: Path,
    result: Any,
    *,
    seed: int = 0,
    options: ServeOptions | None = None,
) -> None:
    """Fill ``result`` (the ``serve`` CheckResult) for the port whose processing file is ``port_file``."""
    options = options or ServeOptions()
    python = serve_python()
    if python is None:
        result.skipped = (
            f"no serve environment: set MMPORT_SERVE_PYTHON or build {DEFAULT_SERVE_PYTHON} "
            "with shared/recipes/vllm-cpu-serve-env.sh"
        )
        return
    model_file = port_file.with_name(
        port_file.name.removesuffix("_processing.py") + ".py"
    )
    if not model_file.exists():
        result.skipped = f"no model file {model_file.name} beside the port: `mmport scaffold` writes one"
        return
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mmport-serve-") as tmp:
        for layout in (None,) if options.weights else options.layouts:
            name = layout.value if layout else "weights"
            workdir = Path(tmp) / name
            workdir.mkdir()
            try:
                failures, said, metrics = _serve_layout(
                    snapshot, model_file, layout, options, python, workdir, seed
                )
            except FOREIGN_ERRORS as exc:
                # the reference side broke: report it as this layout's outcome
                from mmport.verify.report import Failure

                reason = f"{type(exc).__name__}: {exc}"
                failures, said, metrics = (
                    [
                        Failure(
                            "serve",
                            f"{name}: no HF reference ({_short(reason)})",
                            loudness="unknown",
                        )
                    ],
                    [],
                    {},
                )
            result.runs += 1
            result.failures.extend(failures)
            result.metrics.update(metrics)
            notes += said
    result.summary = "; ".join(notes)
