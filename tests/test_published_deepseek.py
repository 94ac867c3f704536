"""DeepSeek-VL2's processor, kept in its own package (``--processor-code``), as published.

The package is deepseek-ai/DeepSeek-VL2's ``deepseek_vl2`` (tests/data/published/deepseek-vl2,
see its PROVENANCE.md). Without consent inspect reads its processor statically
and nothing runs (the package's ``__init__`` prints a line when it runs); with
consent, only the processor's module and the sibling module it imports run
(the package's ``__init__`` files, which import the model code, do not). The
published snapshot holds no tokenizer, which stops it there; with a stand-in
tokenizer built here the processor loads, and mmport stops at
what it cannot port: a processor that handles images itself, with no image
sub-processor to probe.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from conftest import run_cli
from published import published_snapshot

# What the package's own __init__ prints when it runs.
RAN = "patching the collections module"
# The sentence tokens of the checkpoint's special_tokens_map.json (PROVENANCE.md),
# DeepSeek's own spelling, fullwidth bars and all, held by the stand-in tokenizer.
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"  # noqa: RUF001


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
    reads or adds, taken from its own signature and source.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(
        models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[])
    )
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


def test_with_a_stand_in_tokenizer_it_stops_at_the_missing_image_processor(tmp_path):
    # The processor loads and builds (its __init__ adds and prints its tokens, kept off
    # stdout); it handles images itself (attributes = ["tokenizer"]), which mmport cannot probe.
    snapshot, package = _published(tmp_path)
    _stand_in_tokenizer(snapshot)
    out = tmp_path / "out"
    result = _scaffold(snapshot, package, out)
    said = result.stderr.strip()
    assert result.returncode == 2, result.stdout + said
    assert len(said.splitlines()) == 1 and "Traceback" not in said, said
    assert "Add pad token" not in result.stdout + said  # the processor's own prints
    start = _line_of(_module(package), "class DeepseekVLV2Processor(")
    assert (
        f"its processor DeepseekVLV2Processor (models/processing_deepseek_vl_v2.py:{start}) "
        "has no image, video or audio sub-processor (attributes ['tokenizer'])" in said
    ), said
    assert not out.exists()


def test_the_stand_in_tokenizer_holds_what_the_processor_reads(tmp_path):
    # Each token the processor's __init__ looks up or adds is one id of the stand-in.
    snapshot, _ = _published(tmp_path)
    held = _stand_in_tokenizer(snapshot)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(snapshot)
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in held]
    assert all(len(one) == 1 for one in ids), dict(zip(held, ids, strict=True))
    assert len({one[0] for one in ids}) == len(held)
