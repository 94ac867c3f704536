"""The bundled runtime against the real vLLM 0.33: same port, same inputs, same result.

Runs only where ``vllm.multimodal.processing`` imports (``-m vllm``).
"""

from __future__ import annotations

import json
import random
import shutil

import pytest
from PIL import Image

from mmport.runtime.backends import BundledBackend, PortOutput, select_backend

pytestmark = pytest.mark.vllm

ERROR_CASES = ["no_fields", "no_updates", "empty_replacement"]
WORKING_CASES = [
    "replace",
    "insert_start",
    "insert_prefix",
    "insert_end",
    "select_token_id",
    "text_fallback",
]
WORKING_CASES += ["flat_and_shared"]


@pytest.fixture(scope="module")
def backends():
    """(bundled, real) — the real one skips the module where vLLM is absent."""
    pytest.importorskip("vllm.multimodal.processing")
    return BundledBackend(), select_backend("vllm")


def build_both(backends, port_path, snapshot):
    return [
        backend.build(backend.load_port(port_path), snapshot) for backend in backends
    ]


def assert_same(bundled: PortOutput, real: PortOutput) -> None:
    """Field by field, so that a failure says which part differs."""
    assert bundled.prompt_token_ids == real.prompt_token_ids
    assert bundled.placeholders == real.placeholders
    assert bundled.items.keys() == real.items.keys()
    for modality, items in bundled.items.items():
        for mine, theirs in zip(items, real.items[modality], strict=True):
            assert mine.keys() == theirs.keys()
            for key, value in mine.items():
                assert (value.dtype, value.shape) == (
                    theirs[key].dtype,
                    theirs[key].shape,
                ), key
                assert value.equal(theirs[key]), key
    assert bundled == real


def picture(width, height, seed):
    return Image.new("RGB", (width, height), (seed * 40 % 256, 90, 200))


LLAVA_PROBES = [
    ("USER: <image>\nWhat is this? ASSISTANT:", [picture(40, 90, 1)]),
    ("<image> then <image>, compared.", [picture(300, 200, 2), picture(1000, 20, 3)]),
    ("no images at all", []),
    ("<image><image><image>", [picture(16, 16, 4)] * 3),
]


@pytest.mark.parametrize(("prompt", "pictures"), LLAVA_PROBES)
def test_handwritten_llava_port_gives_identical_output(
    backends, llava_port_file, llava_snapshot, prompt, pictures
):
    bundled, real = build_both(backends, llava_port_file, llava_snapshot)

    assert_same(
        bundled.process(prompt, {"image": pictures}),
        real.process(prompt, {"image": pictures}),
    )


def test_handwritten_llava_dummy_path_is_identical(
    backends, llava_port_file, llava_snapshot
):
    bundled, real = build_both(backends, llava_port_file, llava_snapshot)

    assert bundled.dummy(4096, {"image": 2})[0] == real.dummy(4096, {"image": 2})[0]
    assert_same(
        bundled.dummy_output(4096, {"image": 2}), real.dummy_output(4096, {"image": 2})
    )
    assert bundled.supported_mm_limits() == real.supported_mm_limits()


@pytest.mark.parametrize("case", WORKING_CASES)
def test_runtime_features_give_identical_output(
    backends, write_port, llava_snapshot, case
):
    bundled, real = build_both(backends, write_port(case), llava_snapshot)
    pictures = [picture(40, 30, 1), picture(64, 48, 2)]

    assert_same(
        bundled.process("a <image> b <image>", {"image": pictures}),
        real.process("a <image> b <image>", {"image": pictures}),
    )


def raised(runner, prompt, pictures):
    with pytest.raises(Exception) as caught:
        runner.process(prompt, {"image": pictures})
    return type(caught.value).__name__, str(caught.value).split("!")[0]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_count_checks_fail_alike(backends, write_port, llava_snapshot, case):
    bundled, real = build_both(backends, write_port(case), llava_snapshot)

    assert raised(bundled, "<image>", [picture(32, 32, 1)]) == raised(
        real, "<image>", [picture(32, 32, 1)]
    )


def test_unmatched_target_and_item_limit_fail_alike(
    backends, write_port, llava_snapshot
):
    bundled, real = build_both(
        backends, write_port("replace", MAX_IMAGES=1), llava_snapshot
    )
    pictures = [picture(32, 32, 1)]

    assert raised(bundled, "no placeholder", pictures) == raised(
        real, "no placeholder", pictures
    )
    assert raised(bundled, "<image><image>", pictures * 2) == raised(
        real, "<image><image>", pictures * 2
    )


def test_architecture_unknown_to_vllm_still_builds(
    backends, llava_port_file, llava_snapshot, tmp_path
):
    snapshot = shutil.copytree(llava_snapshot, tmp_path / "renamed")
    config = json.loads((snapshot / "config.json").read_text())
    config["architectures"] = ["MmportTestOnlyLlavaForConditionalGeneration"]
    (snapshot / "config.json").write_text(json.dumps(config))
    bundled, real = build_both(backends, llava_port_file, snapshot)
    prompt, pictures = LLAVA_PROBES[0]

    assert_same(
        bundled.process(prompt, {"image": pictures}),
        real.process(prompt, {"image": pictures}),
    )


# -- the matching algorithm alone, on random updates ---------------------------

TOKENS = [1, 2, 3, 4]


def random_updates(rng):
    """A reproducible description of prompt updates over two modalities."""
    spec = []
    for modality, base in (("image", 100), ("audio", 200)):
        for _ in range(rng.randint(1, 2)):
            target = rng.choice(
                [
                    ("tokens", rng.sample(TOKENS, rng.randint(1, 2))),
                    ("start",),
                    ("end",),
                    ("prefix", TOKENS[:1]),
                ]
            )
            content = [base + rng.randint(0, 3)] * rng.randint(0, 3) + [base]
            spec.append(
                (
                    modality,
                    rng.choice(["insert", "replace"]),
                    target,
                    content,
                    rng.random() < 0.3,
                )
            )
    return spec


def build_updates(processing, spec):
    """Turn a description into PromptUpdate objects of one vLLM implementation."""
    updates = []
    for modality, mode, target, content, select in spec:
        kind, *args = target
        if kind != "tokens":
            target = getattr(processing.PromptIndexTargets, kind)(*args)
        else:
            target = args[0]
        details = (
            processing.PromptUpdateDetails.select_token_id(content, content[-1])
            if select
            else content
        )
        cls = (
            processing.PromptInsertion
            if mode == "insert"
            else processing.PromptReplacement
        )
        updates.append(cls(modality, target, lambda i, d=details: d))
    return updates


def matching_outcome(
    apply_matches, find_placeholders, processing, spec, prompt, counts
):
    grouped = {}
    for update in build_updates(processing, spec):
        grouped.setdefault(update.modality, []).append(update)
    bound = {
        m: [[u.resolve(i) for u in us] for i in range(counts[m])]
        for m, us in grouped.items()
    }
    new_ids, result, placeholders = apply_matches(prompt, bound)
    found = find_placeholders(new_ids, bound)

    def describe(infos):
        return {
            m: [
                (
                    p.item_idx,
                    p.start_idx,
                    p.length,
                    None if p.is_embed is None else p.is_embed.tolist(),
                )
                for p in ps
            ]
            for m, ps in infos.items()
        }

    return new_ids, dict(result), describe(placeholders), describe(found)


def test_matching_agrees_with_vllm_on_random_updates(backends):
    from vllm.multimodal import processing as real_processing
    from vllm.multimodal.processing import processor as real_module

    from mmport.runtime.vllm_compat.multimodal import processing as our_processing
    from mmport.runtime.vllm_compat.multimodal.processing import matching as our_module

    rng = random.Random(20260)
    for _ in range(400):
        spec = random_updates(rng)
        prompt = [rng.choice(TOKENS) for _ in range(rng.randint(0, 8))]
        counts = {"image": rng.randint(0, 3), "audio": rng.randint(0, 2)}
        ours = matching_outcome(
            our_module.apply_token_matches_with_placeholders,
            our_module.find_mm_placeholders,
            our_processing,
            spec,
            prompt,
            counts,
        )
        theirs = matching_outcome(
            real_module._apply_token_matches_with_placeholders,
            real_module.find_mm_placeholders,
            real_processing,
            spec,
            prompt,
            counts,
        )
        assert ours == theirs, (spec, prompt, counts)
