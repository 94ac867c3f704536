"""Processors whose entry point is a method of their own: Molmo-7B-D's ``process``.

The snapshot is built from Molmo-7B-D-0924's published processing files
(tests/data/published/molmo-7b-d-0924, see its PROVENANCE.md), unedited.
Without ``--trust-remote-code`` inspect reads them statically and nothing
runs; with it, scaffold and verify pass with zero edits, a wrong port fails,
and inside real vLLM 0.33 the port gives HF's ids (``-m vllm``).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import invoke, run_cli
from published import published_snapshot

MOLMO = "molmo-7b-d-0924"

# The entry point's prompt helper, as older processors write it, and what the reader makes of it.
READER_EXAMPLES = [
    (
        # Molmo's shape: a role format under the kwargs' default, a leading space, a first token.
        """
        class AcmeProcessorKwargs(ProcessingKwargs, total=False):
            _defaults = {"text_kwargs": {"message_format": "role", "always_start_with_space": True}}

        class AcmeProcessor(ProcessorMixin):
            def get_tokens_input(self, prompt, message_format, always_start_with_space):
                if message_format == "none" or message_format is None:
                    pass
                elif message_format == "role":
                    prompt = "User: " + prompt + " Assistant:"
                else:
                    raise NotImplementedError(message_format)
                if always_start_with_space:
                    prompt = " " + prompt
                return self.tokenizer.encode(prompt, add_special_tokens=False)

            def process(self, text=None, images=None, **kwargs: Unpack[AcmeProcessorKwargs]):
                output_kwargs = self._merge_kwargs(AcmeProcessorKwargs, **kwargs)
                tokens = self.get_tokens_input(
                    text,
                    output_kwargs["text_kwargs"]["message_format"],
                    output_kwargs["text_kwargs"]["always_start_with_space"],
                )
                image_idx = [-1] * len(images)
                out = self.image_processor.multimodal_preprocess(images=images, image_idx=image_idx, tokens=tokens)
                bos = self.tokenizer.bos_token_id or self.tokenizer.eos_token_id
                out["input_ids"] = np.pad(out["input_ids"], [[1, 0]], constant_values=bos)
                return out
        """,
        {
            "method": "process",
            "before": " User: ",
            "after": " Assistant:",
            "prepended": ("bos_token", "eos_token"),
            "items_index": -1,
        },
    ),
    (
        # The default format is "none": no text around the prompt.
        """
        class AcmeProcessorKwargs(ProcessingKwargs, total=False):
            _defaults = {"text_kwargs": {"message_format": "none"}}

        class AcmeProcessor(ProcessorMixin):
            def get_tokens_input(self, prompt, message_format):
                if message_format == "role":
                    prompt = "User: " + prompt
                return self.tokenizer.encode(prompt)

            def run(self, text, images, **kwargs: Unpack[AcmeProcessorKwargs]):
                output_kwargs = self._merge_kwargs(AcmeProcessorKwargs, **kwargs)
                tokens = self.get_tokens_input(text, output_kwargs["text_kwargs"]["message_format"])
                return tokens
        """,
        {"method": "run", "before": "", "after": "", "format_read": True},
    ),
    (
        # A helper that does more than concatenate is not followed: the port refuses, never guesses.
        """
        class AcmeProcessor(ProcessorMixin):
            def get_tokens_input(self, prompt):
                prompt = prompt.strip()
                return self.tokenizer.encode(prompt)

            def process(self, text=None, images=None):
                return self.get_tokens_input(text)
        """,
        {"method": "process", "format_read": False},
    ),
]


@pytest.mark.parametrize("source, expected", READER_EXAMPLES)
def test_the_reader_follows_an_entry_points_prompt_helper(source, expected, tmp_path):
    from mmport.analyzers.entrypoint import read_entry_point

    module = tmp_path / "processing_acme.py"
    module.write_text(textwrap.dedent(source))
    entry = read_entry_point(module, module.name, "AcmeProcessor")
    assert entry is not None
    assert {key: getattr(entry, key) for key in expected} == expected


def test_a_processor_with_its_own_call_has_no_other_entry_point(tmp_path):
    from mmport.analyzers.entrypoint import read_entry_point

    module = tmp_path / "processing_acme.py"
    module.write_text(
        textwrap.dedent(
            """
            class AcmeProcessor(ProcessorMixin):
                def __call__(self, text=None, images=None):
                    return self.process(text=text, images=images)

                def process(self, text=None, images=None):
                    return text
            """
        )
    )
    assert read_entry_point(module, module.name, "AcmeProcessor") is None


@pytest.mark.parametrize(
    "name", ["Florence2Processor", "Cohere2VisionProcessor", "GroundingDinoProcessor"]
)
def test_a_hook_the_base_call_runs_is_not_an_entry_point(name):
    # These override prepare_inputs_layout / validate_inputs, which take text and images
    # but are run by ProcessorMixin.__call__: that stays their entry point.
    import transformers

    from mmport.hf.entry import entry_point

    assert entry_point(getattr(transformers, name)) is None


def test_the_reader_skips_a_hook_the_base_call_runs(tmp_path):
    from mmport.analyzers.entrypoint import read_entry_point

    module = tmp_path / "processing_acme.py"
    module.write_text(
        textwrap.dedent(
            """
            class AcmeProcessor(ProcessorMixin):
                def prepare_inputs_layout(self, images=None, text=None, **kwargs):
                    return text, images
            """
        )
    )
    assert read_entry_point(module, module.name, "AcmeProcessor") is None


def _line_of(snapshot: Path, file: str, code: str) -> int:
    """The line of ``file`` holding ``code`` (read from the published file, not assumed)."""
    lines = (snapshot / file).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if code in line)


def test_inspect_without_the_flag_reads_molmo_statically_and_runs_nothing(tmp_path):
    snapshot = published_snapshot(MOLMO, tmp_path / "molmo")
    modules = tmp_path / "hf_modules"
    result = run_cli(
        "inspect", str(snapshot), "--json", env={"HF_MODULES_CACHE": str(modules)}
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["static"] is True
    facts = {f["fact"]: f for f in report["facts"]}
    entry = facts["processor entry point"]
    assert entry["value"].startswith("process(")
    assert entry["source"]["line"] == _line_of(
        snapshot, "preprocessing_molmo.py", "def process("
    )
    fmt = facts["prompt format (every prompt, items or not)"]
    assert "{text}" in fmt["value"]
    first = facts["token put first, after the items are in"]
    assert first["source"]["line"] == _line_of(
        snapshot, "preprocessing_molmo.py", "np.pad("
    )
    inserted = facts["images inserted at"]
    assert inserted["source"]["line"] == _line_of(
        snapshot, "preprocessing_molmo.py", "image_idx = [-1]"
    )
    assert not any(modules.rglob("preprocessing_molmo.py")), (
        "transformers copied the code: it was about to run"
    )


def test_scaffold_without_the_flag_refuses_in_one_line(tmp_path):
    snapshot = published_snapshot(MOLMO, tmp_path / "molmo")
    out = tmp_path / "out"
    result = invoke("scaffold", str(snapshot), "-o", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stderr.strip()
    assert len(said.splitlines()) == 1 and "--trust-remote-code" in said
    assert not out.exists()


def test_the_reading_matches_what_molmos_process_writes(tmp_path):
    pytest.importorskip("einops", reason="Molmo's image processor imports einops")
    from mmport.analyzers.entrypoint import read_entry_point
    from mmport.media import make_image
    from mmport.sources import resolve

    snapshot = published_snapshot(MOLMO, tmp_path / "molmo")
    entry = read_entry_point(
        snapshot / "preprocessing_molmo.py", "preprocessing_molmo.py", "MolmoProcessor"
    )
    processor = resolve(str(snapshot), trust_remote_code=True).load_processor()
    text = "What is in the image?"
    ids = processor.process(text=text, images=[make_image(64, 48, 0)])[
        "input_ids"
    ].tolist()
    tokenizer = processor.tokenizer
    prompt = tokenizer.encode(
        entry.before + text + entry.after, add_special_tokens=False
    )
    first = getattr(tokenizer, f"{entry.prepended[0]}_id") or getattr(
        tokenizer, f"{entry.prepended[1]}_id"
    )
    assert ids[0] == first and ids[-len(prompt) :] == prompt


@pytest.mark.slow
def test_molmo_scaffolds_and_verifies_with_zero_edits(tmp_path):
    pytest.importorskip("einops", reason="Molmo's image processor imports einops")
    snapshot = published_snapshot(MOLMO, tmp_path / "molmo")
    out = tmp_path / "port"
    result = invoke("scaffold", str(snapshot), "-o", str(out), "--trust-remote-code")
    assert result.returncode == 0, result.stdout + result.stderr
    port = out / "molmo_processing.py"
    assert (
        "PromptInsertion" in port.read_text()
        and "_postprocess_prompt" in port.read_text()
    )
    from conftest import verify_report

    code, report = verify_report(
        str(snapshot), port, probes=6, backend="bundled", trust_remote_code=True
    )
    assert code == 0, json.dumps(
        {n: c["failures"][:2] for n, c in report["checks"].items() if c["failures"]},
        indent=1,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "old, new",
    [
        ('PROMPT_AFTER = " Assistant:"', 'PROMPT_AFTER = " Assistant"'),
        (
            "PromptIndexTargets.prefix([self.info.get_first_token_id()])",
            "PromptIndexTargets.start()",
        ),
    ],
)
def test_a_wrong_molmo_port_fails(old, new, tmp_path):
    pytest.importorskip("einops", reason="Molmo's image processor imports einops")
    from conftest import failed_checks, verify_report

    snapshot = published_snapshot(MOLMO, tmp_path / "molmo")
    out = tmp_path / "port"
    assert (
        invoke(
            "scaffold", str(snapshot), "-o", str(out), "--trust-remote-code"
        ).returncode
        == 0
    )
    port = out / "molmo_processing.py"
    source = port.read_text()
    assert old in source
    port.write_text(source.replace(old, new))
    code, report = verify_report(
        str(snapshot), port, probes=4, backend="bundled", trust_remote_code=True
    )
    assert code == 1 and "tokens" in failed_checks(report)


@pytest.mark.vllm
def test_the_molmo_port_gives_hf_ids_inside_real_vllm(tmp_path):
    from conftest import verify_report

    snapshot = published_snapshot(MOLMO, tmp_path / "molmo")
    out = tmp_path / "port"
    assert (
        invoke(
            "scaffold", str(snapshot), "-o", str(out), "--trust-remote-code"
        ).returncode
        == 0
    )
    code, report = verify_report(
        str(snapshot),
        out / "molmo_processing.py",
        probes=4,
        backend="vllm",
        trust_remote_code=True,
    )
    assert report["backend"].startswith("vllm")
    assert code == 0, json.dumps(
        {n: c["failures"][:2] for n, c in report["checks"].items() if c["failures"]},
        indent=1,
    )
