"""Realistic synthetic tokenizers, and ports that follow their merges across item edges.

A checkpoint's tokenizer merges whitespace runs and the text a processor
writes around an item with the prompt's own text; a token-level splice (what
vLLM does) does not. Synthetic snapshots are built to show it, and the
generated port merges at every item's edges where HF's ids show merges.
"""

from __future__ import annotations

import json

import pytest
from conftest import invoke, mutated_port

from mmport.edgetokens import retokenize_edges
from mmport.sources import resolve
from mmport.sources.tokens import WHITESPACE_RUNS

slow = pytest.mark.slow

# The port's processor takes the re-encoding step from the shared support module.
MERGE_STEP = "RetokenizedEdgesMixin,"


def _toy(table: dict[tuple[int, ...], list[int]]):
    """A toy re-encoder: a window in ``table`` becomes its value, any other stays as it is."""
    return lambda window: table.get(tuple(window), window)


def test_retokenize_edges_merges_across_an_edge_and_chains() -> None:
    # 3+3 → 9 is one token; 3+3+3+3... is one token 10 when the window closes at a special token.
    retokenize = _toy({(3, 3): [9], (3, 3, 3): [10]})
    assert retokenize_edges([7, 3, 3, 8], [2], {7, 8}, retokenize) == (
        [7, 9, 8],
        [0, 1, 1, 2],
    )
    # Two edges inside one window (an item's tail, one token of text, the next item's head).
    assert retokenize_edges([7, 3, 3, 3, 8], [2, 3], {7, 8}, retokenize)[0] == [
        7,
        10,
        8,
    ]
    # Only at edges, and never across a boundary token.
    assert retokenize_edges([3, 3, 3], [], set(), retokenize)[0] == [3, 3, 3]
    assert retokenize_edges([3, 3], [1], {3}, retokenize)[0] == [3, 3]


def test_retokenize_edges_splits_where_the_next_token_decides() -> None:
    # A GPT-2 pre-tokenizer: "\n\n" (5) before a word (6) is "\n" (4) "\n" (4) and the word.
    retokenize = _toy({(5, 6, 6): [4, 4, 6, 6], (5, 6): [4, 4, 6]})
    ids, moved = retokenize_edges([8, 5, 6, 6, 8], [2], {8}, retokenize)
    assert ids == [8, 4, 4, 6, 6, 8] and moved == [0, 1, 3, 4, 5]


def test_retokenize_edges_leaves_a_window_it_cannot_align() -> None:
    # The window is cut by ``reach`` and its re-encoding changes its last token: nothing is known
    # about the tokens after it, so the splice stays.
    retokenize = _toy({(5, 6): [11]})
    assert retokenize_edges([5, 6, 6], [1], set(), retokenize, reach=1)[0] == [5, 6, 6]


@pytest.mark.parametrize("model_type", ["llava", "qwen2_vl", "gemma3"])
def test_synthetic_tokenizer_holds_whitespace_runs_as_single_tokens(model_type) -> None:
    tokenizer = resolve(model_type).load_processor().tokenizer
    for run in WHITESPACE_RUNS:
        assert len(tokenizer.encode(run, add_special_tokens=False)) == 1, repr(run)
        # ...and a run split in two merges back, as on a checkpoint's tokenizer.
        halves = tokenizer.encode(
            run[: len(run) // 2], add_special_tokens=False
        ) + tokenizer.encode(run[len(run) // 2 :], add_special_tokens=False)
        assert tokenizer.decode(halves) == run


@pytest.mark.parametrize("model_type", ["qwen2_vl", "llava", "gemma3"])
def test_synthetic_tokenizer_follows_the_familys_bos_rule(model_type) -> None:
    # The text model's own tokenizer class (transformers' mapping, by the text
    # config's model_type, else the model's) decides: Qwen2Tokenizer names no BOS;
    # GemmaTokenizer and the generic backend (a Llama text model) prepend one.
    import inspect

    from transformers import CONFIG_MAPPING, TokenizersBackend
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    config = CONFIG_MAPPING[model_type]()
    mapped = [
        TOKENIZER_MAPPING_NAMES.get(t)
        for t in (config.get_text_config().model_type, config.model_type)
    ]
    tokenizer = resolve(model_type).load_processor().tokenizer
    family = type(tokenizer)
    assert family is TokenizersBackend or family.__name__ == next(
        name for name in mapped if name
    ), (family, mapped)
    bos = inspect.signature(family.__init__).parameters.get("bos_token")
    names_bos = family is TokenizersBackend or bos is None or bos.default is not None
    ids = tokenizer("hi")["input_ids"]
    assert (
        tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id
    ) == names_bos, (family, ids)


def test_text_the_processor_writes_around_an_item_is_one_token() -> None:
    from mmport.sources.synthetic import wrapper_texts

    processor = resolve("gemma3").load_processor()
    for text in wrapper_texts(processor) or ("\n\n",):
        assert len(processor.tokenizer.encode(text, add_special_tokens=False)) == 1


def _port_and_report(model_type: str, port, tmp_path) -> tuple[int, dict]:
    out = tmp_path / "report.json"
    result = invoke(
        "verify", model_type, "--port", str(port), "--settings", "0", "--json", str(out)
    )
    return result.returncode, json.loads(out.read_text())


def test_gemma3_port_merges_newlines_across_item_edges(scaffolded, tmp_path) -> None:
    port_dir = scaffolded("gemma3")
    source = (port_dir / "gemma3_processing.py").read_text()
    assert MERGE_STEP in source
    # The step itself lives once per directory, in the shared support module.
    assert "def retokenize_edges(" not in source
    assert "def retokenize_edges(" in (port_dir / "mm_request_support.py").read_text()
    inspected = json.loads(invoke("inspect", "gemma3", "--json").stdout)
    merges = [m["edge_merges"] for m in inspected["modalities"] if m["edge_merges"]]
    assert merges and "<item><item>" in merges[0]["contexts"], merges
    code, report = _port_and_report(
        "gemma3", port_dir / "gemma3_processing.py", tmp_path
    )
    assert code == 0, report["checks"]["tokens"]


@pytest.mark.parametrize(
    "model_type",
    [
        "gemma3",  # newlines beside an image merge into one token
        # two spaces before a video whose text starts with a word split as "Ġ" + "ĠFrame"
        pytest.param("internvl", marks=slow),
    ],
)
def test_a_port_without_the_merge_step_fails_tokens(
    model_type, scaffolded, tmp_path
) -> None:
    # The step dropped from the processor's bases (and the import), so the base
    # class's splice is all that runs.
    # (The correct ports pass: above for gemma3, in real vLLM for internvl, test_vllm_ports.)
    wrong = mutated_port(
        scaffolded(model_type),
        model_type,
        MERGE_STEP,
        "",
        tmp_path,
    )
    code, report = _port_and_report(model_type, wrong, tmp_path)
    assert code == 1 and report["checks"]["tokens"]["status"] == "fail", report[
        "checks"
    ]["tokens"]


@pytest.mark.parametrize("model_type", ["qwen2_vl", "llava"])
def test_ports_whose_items_end_in_special_tokens_have_no_merge_step(
    model_type, scaffolded
) -> None:
    source = (scaffolded(model_type) / f"{model_type}_processing.py").read_text()
    assert MERGE_STEP not in source


def test_merges_that_only_a_tiny_image_shows_are_found() -> None:
    # Granite-Docling writes a 1x1 image as one tile whose row ends in a newline
    # and no closing wrapper; a larger image ends in a special token. The
    # newline then merges with the prompt's own: HF's ids for that, derived here,
    # must show a merge the analysis found.
    from mmport.analyzers import analyze
    from mmport.hf.processor import call_processor
    from mmport.media import make_image

    snapshot = resolve("granite_docling")
    processor = snapshot.load_processor()
    tokenizer = processor.tokenizer
    run = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("\n\n\n"))
    ids = call_processor(processor, "<image>\n\n", [make_image(1, 1, 0)])
    assert len(run) == 1 and ids["input_ids"][0].tolist()[-1] == run[0]
    spec = analyze(snapshot)
    assert spec.image.edge_merges is not None


@pytest.mark.vllm
@slow
def test_vllms_own_gemma3_port_splits_merged_newlines_back_wrongly(tmp_path) -> None:
    # docs/findings/gemma3-newline-merges.md, on Gemma 3 4B's geometry (896 px, 256 tokens):
    # an image followed by one newline leaves vLLM's port finding none of its placeholders.
    pytest.importorskip("vllm.multimodal.processing")
    from snapshots import gemma3_896_snapshot

    from mmport.verify import verify_port

    report = verify_port(
        str(gemma3_896_snapshot(tmp_path / "snap")),
        "vllm",
        probes=4,
        seed=0,
        backend="vllm",
        settings_per_modality=0,
    )
    loud = [
        f
        for f in report.checks["tokens"].failures
        if f.loudness == "loud" and f.setting is None
    ]
    assert loud and "0 prompt placeholders" in loud[0].message, report.failure_summary()
    assert "\\n" in report.probe_cases[loud[0].probe], report.probe_cases[loud[0].probe]


@pytest.mark.parametrize(
    ("model_type", "size"), [("molmo2", (64, 64)), ("step3p7", (1600, 1200))]
)
def test_tags_a_processor_writes_as_text_are_added_tokens(model_type, size) -> None:
    # Molmo 2 writes <low_res_im_start>, <im_patch>... as text; its checkpoints' tokenizers hold
    # them as added tokens, so BPE never merges across them. The synthetic snapshot learns them,
    # those written only for an image the processor tiles too (Step3p7's <patch_start>).
    from mmport.hf.processor import call_processor
    from mmport.hf.wrappers import wrapped_placeholder
    from mmport.media import make_image
    from mmport.sources.synthetic import wrapper_texts, written_tags

    processor = resolve(model_type).load_processor()
    tokenizer = processor.tokenizer
    ids = call_processor(
        processor, wrapped_placeholder(processor), [make_image(*size, 0)]
    )["input_ids"][0].tolist()
    tags = written_tags((tokenizer.decode(ids),))
    assert len(tags) > 1, tags
    for tag in tags:
        encoded = tokenizer.encode(tag, add_special_tokens=False)
        assert len(encoded) == 1 and encoded[0] in tokenizer.added_tokens_decoder, (
            tag,
            encoded,
        )
    assert not written_tags(wrapper_texts(processor))
