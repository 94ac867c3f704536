"""DeepSeek-VL2's processor, kept in its own package (``--processor-code``), as published.

The package is deepseek-ai/DeepSeek-VL2's ``deepseek_vl2`` (tests/data/published/deepseek-vl2,
see its PROVENANCE.md). Without consent inspect reads its processor statically
and nothing runs (the package's ``__init__`` prints a line when it runs); with
consent, only the processor's module and the sibling module it imports run
(the package's ``__init__`` files, which import the model code, do not). The
published snapshot holds no tokenizer, which stops it there. With a stand-in
tokenizer built here the processor loads, and mmport ports it: a processor
that handles images itself (no image processor), called by a ``__call__`` of
its own that takes the prompt as ``prompt`` and answers a collated batch, and
that tiles an image only in a prompt of at most two. Scaffold and verify pass
with zero edits (``-m slow``), wrong ports fail, and inside real vLLM 0.33 the
port gives HF's ids (``-m vllm``).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import run_cli
from published import published_snapshot

# What the package's own __init__ prints when it runs.
RAN = "patching the collections module"
# The sentence tokens of the checkpoint's special_tokens_map.json (PROVENANCE.md),
# DeepSeek's own spelling, fullwidth bars and all, held by the stand-in tokenizer.
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"  # noqa: RUF001
# The real ids of the tokens the processor adds, where public sources show them
# (PROVENANCE.md): pad and image from deepseek-vl2's processor's own prints, the
# grounding tokens from DeepSeek-OCR, which shares the vocabulary.
REAL_IDS = {
    "<｜▁pad▁｜>": 2,  # noqa: RUF001
    "<image>": 128815,
    "<|ref|>": 128816,
    "<|/ref|>": 128817,
    "<|det|>": 128818,
    "<|/det|>": 128819,
    "<|grounding|>": 128820,
}


def _published(tmp_path: Path) -> tuple[Path, Path]:
    root = published_snapshot("deepseek-vl2", tmp_path / "deepseek-vl2")
    return root / "snapshot", root / "processor_code" / "deepseek_vl2"


def _scaffold(snapshot: Path, package: Path, out: Path):
    """``scaffold`` of ``snapshot`` into ``out`` in its own process, with consent to run
    the package (what the package prints must be seen on its stdout)."""
    consent = ("--processor-code", str(package), "--trust-remote-code")
    return run_cli("scaffold", str(snapshot), "-o", str(out), *consent)


def _line_of(path: Path, code: str, after: int = 0) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if i > after and code in line)


def test_inspect_reads_the_packages_processor_statically(tmp_path):
    snapshot, package = _published(tmp_path)
    result = run_cli(
        "inspect", str(snapshot), "--processor-code", str(package), "--json"
    )
    assert result.returncode == 0, result.stderr
    assert RAN not in result.stdout + result.stderr
    facts = json.loads(result.stdout)["facts"]
    module = package / "models" / "processing_deepseek_vl_v2.py"
    processor = next(f for f in facts if f["fact"] == "processor")
    assert processor["value"].startswith("DeepseekVLV2Processor(")
    start = _line_of(module, "class DeepseekVLV2Processor(")
    assert processor["source"]["line"] == start
    call = next(
        f
        for f in facts
        if f["fact"] == "processor defines" and "__call__" in f["value"]
    )
    assert call["source"]["line"] == _line_of(module, "def __call__(", after=start)


def _stand_in_tokenizer(snapshot: Path) -> list[str]:
    """Write a stand-in tokenizer into ``snapshot``; the special tokens it holds.

    Not the checkpoint's (no public copy was found, PROVENANCE.md): a byte-level
    BPE with no merges, saved as the ``LlamaTokenizerFast`` DeepSeek's
    tokenizer_config.json names, holding the tokens the processor's ``__init__``
    reads or adds, taken from its own signature and source. The special tokens
    whose real ids public sources show sit at those ids (:data:`REAL_IDS`, and
    the sentence tokens at the ids config.json gives); unused entries fill the
    vocabulary up to them. The two chat tokens, whose ids were not found, get
    the next ones, as the processor's ``__init__`` adds them.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaTokenizerFast

    language = json.loads((snapshot / "config.json").read_text())["language_config"]
    real = {
        BOS: language["bos_token_id"],
        EOS: language["eos_token_id"],
        **REAL_IDS,
    }
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    free = (
        i
        for i in range(len(real) + len(alphabet) + max(real.values()))
        if i not in real.values()
    )
    vocab = {**real, **{c: next(free) for c in alphabet}}
    vocab.update({f"<stand-in {i}>": i for i in free if i < max(real.values())})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    module = _module(snapshot.parent / "processor_code" / "deepseek_vl2")
    tree = ast.parse(module.read_text())
    init = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and node.name == "__init__"
        and any(a.arg == "candidate_resolutions" for a in node.args.args)
    )
    defaults = dict(
        zip(
            [a.arg for a in init.args.args][-len(init.args.defaults) :],
            [ast.literal_eval(d) for d in init.args.defaults],
            strict=True,
        )
    )
    # The lists of tokens __init__ adds as additional special tokens.
    added = [
        token
        for node in ast.walk(init)
        if isinstance(node, ast.Assign)
        and any(
            isinstance(t, ast.Name) and t.id == "special_tokens" for t in node.targets
        )
        and isinstance(node.value, ast.List)
        for element in node.value.elts
        if isinstance(element, ast.Constant)  # [image_token] names a parameter
        for token in [element.value]
    ]
    tokenizer = LlamaTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=None,  # DeepSeek's special_tokens_map.json names none
        pad_token=defaults["pad_token"],
        additional_special_tokens=[defaults["image_token"], *added],
    )
    tokenizer.save_pretrained(snapshot)
    config = json.loads((snapshot / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "LlamaTokenizerFast"  # as DeepSeek's names it
    (snapshot / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return [BOS, EOS, defaults["pad_token"], defaults["image_token"], *added]


def _module(package: Path) -> Path:
    return package / "models" / "processing_deepseek_vl_v2.py"


def test_with_consent_only_the_processors_module_is_imported(tmp_path):
    # The package's __init__ files (which print, and import the model code) never run:
    # the processor's module and conversation.py, which it imports itself, do.
    snapshot, package = _published(tmp_path)
    out = tmp_path / "out"
    result = _scaffold(snapshot, package, out)
    said = result.stderr.strip()
    assert RAN not in result.stdout + said
    assert "modeling_deepseek" not in said and "siglip_vit" not in said, said
    # The published snapshot holds no tokenizer (PROVENANCE.md): that stops it first.
    assert result.returncode == 2, result.stdout + said
    assert len(said.splitlines()) == 1 and "Traceback" not in said
    assert "the HF processor does not load" in said and "tokenizer" in said, said
    assert not out.exists()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The published processor, with the stand-in tokenizer, resolved as mmport resolves it (with consent).

    One copy per test process: Python imports the package's modules once, from one place.
    """
    from mmport.sources import resolve

    snapshot, package = _published(tmp_path_factory.mktemp("stand-in"))
    _stand_in_tokenizer(snapshot)
    return resolve(str(snapshot), trust_remote_code=True, processor_code=package)


def test_mmport_calls_the_processor_through_its_own_call(loaded):
    # No image processor, and a __call__ taking `prompt`, not `text`: mmport calls it there
    # and reads its collated batch of one as a BatchFeature of that prompt.
    from mmport.hf.modalities import handled_modalities, handles_images_itself
    from mmport.hf.processor import call_processor, probe_media

    processor = loaded.load_processor()
    assert processor.get_attributes() == ["tokenizer"]
    assert handles_images_itself(processor) and handled_modalities(processor) == [
        "image"
    ]
    images = [probe_media("image", 0), probe_media("image", 1)]
    prompt = f"a{processor.image_token}b{processor.image_token}"
    raw = processor(prompt=prompt, images=images)
    got = call_processor(processor, prompt, images)
    assert type(raw).__name__ != "BatchFeature" and type(got).__name__ == "BatchFeature"
    assert got["input_ids"].tolist() == raw["input_ids"].tolist()
    # The item tensors lose the batch-of-one axis: the images' rows, as vLLM splits them.
    for key in ("images", "images_spatial_crop"):
        assert got[key].shape == raw[key].shape[1:] and bool(
            (got[key] == raw[key][0]).all()
        )
    assert "sft_format" not in got  # not a tensor
    rows = int((got["images_spatial_crop"].prod(-1) + 1).sum())
    assert got["images"].shape[0] == rows


def test_a_prompt_without_images_gets_the_empty_list(loaded):
    # It takes len(images): None fails, the empty list does, and its zero filler
    # in place of images is not an output of any image.
    from mmport.hf.processor import call_processor

    processor = loaded.load_processor()
    with pytest.raises(TypeError):
        processor(prompt="a cat", images=None)
    raw = processor(prompt="a cat", images=[])
    got = call_processor(processor, "a cat", [])
    assert got["input_ids"].tolist() == raw["input_ids"].tolist()
    assert not bool(raw["images"].any()) and "images" not in got


def _verify(loaded, port: Path, backend: str):
    """``verify``'s exit code and report for ``port`` on the loaded snapshot, with consent
    to run its package."""
    from conftest import verify_report

    return verify_report(
        str(loaded.path),
        port,
        probes=6,
        backend=backend,
        trust_remote_code=True,
        processor_code=loaded.processor_code.root,
    )


def _alone_up_to(processor) -> int | None:
    """The most copies of one large image a prompt holds with the image's ids as alone, by HF itself."""
    from mmport.media import make_image

    image = make_image(1600, 600, 0)
    ids = [
        processor(prompt=processor.image_token * n, images=[image] * n)["input_ids"][0]
        for n in range(1, 5)
    ]
    per_image = [len(i) - 1 for i in ids]  # HF puts one BOS first
    alone = per_image[0]
    return next((n for n in range(1, 4) if per_image[n] != (n + 1) * alone), None)


@pytest.mark.slow
def test_deepseek_vl2_scaffolds_and_verifies_with_zero_edits(loaded, tmp_path):

    out = tmp_path / "port"
    result = _scaffold(loaded.path, loaded.processor_code.root, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Add pad token" not in result.stdout
    port = out / "deepseek_vl_v2_processing.py"
    source = port.read_text()
    limit = _alone_up_to(loaded.load_processor())
    assert limit is not None and f"ALONE_UP_TO = {limit}\n" in source
    assert "_cached_apply_hf_processor" in source and "_get_mm_hashes" in source
    code, report = _verify(loaded, port, "bundled")
    assert code == 0, json.dumps(
        {n: c["failures"][:2] for n, c in report["checks"].items() if c["failures"]},
        indent=1,
    )
    # A probe of more images than ALONE_UP_TO was judged, and said so.
    assert f"at most {limit} images" in report["checks"]["tokens"]["summary"]


def _without(source: str, start: str, end: str) -> str:
    return source[: source.index(start)] + source[source.index(end) :]


@pytest.mark.slow
@pytest.mark.parametrize(
    "edit, check",
    [
        # Hashes an image of a prompt of three as alone: vLLM's caches would mix the two.
        (
            lambda s: _without(
                s, "    def _get_mm_hashes", "    def _cached_apply_hf_processor"
            ),
            "cache",
        ),
        # Forgets the BOS HF puts first.
        (
            lambda s: s.replace(
                "return [\n            *prompt[:start],\n            self.info.get_tokenizer().bos_token_id,\n",
                "return [\n            *prompt[:start],\n",
            ),
            "tokens",
        ),
    ],
    ids=["hashed-as-alone", "no-bos"],
)
def test_a_wrong_deepseek_vl2_port_fails(edit, check, loaded, tmp_path):
    from conftest import failed_checks

    out = tmp_path / "port"
    assert _scaffold(loaded.path, loaded.processor_code.root, out).returncode == 0
    port = out / "deepseek_vl_v2_processing.py"
    source = port.read_text()
    edited = edit(source)
    assert edited != source
    port.write_text(edited)
    code, report = _verify(loaded, port, "bundled")
    assert code == 1 and check in failed_checks(report), failed_checks(report)


@pytest.mark.vllm
def test_the_deepseek_vl2_port_gives_hf_ids_inside_real_vllm(loaded, tmp_path):
    # vLLM 0.33 carries a DeepseekVLV2Processor of its own (another __call__, other output
    # names); the port asks for the checkpoint's, registered with AutoProcessor.

    out = tmp_path / "port"
    assert _scaffold(loaded.path, loaded.processor_code.root, out).returncode == 0
    code, report = _verify(loaded, out / "deepseek_vl_v2_processing.py", "vllm")
    assert report["backend"].startswith("vllm")
    assert code == 0, json.dumps(
        {n: c["failures"][:2] for n, c in report["checks"].items() if c["failures"]},
        indent=1,
    )


def test_the_stand_in_tokenizer_holds_what_the_processor_reads(tmp_path):
    # Each token the processor's __init__ looks up or adds is one id of the stand-in.
    snapshot, _ = _published(tmp_path)
    held = _stand_in_tokenizer(snapshot)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(snapshot)
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in held]
    assert all(len(one) == 1 for one in ids), dict(zip(held, ids, strict=True))
    assert len({one[0] for one in ids}) == len(held)
