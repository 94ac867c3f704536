"""A corpus of broken inputs: every entry is exit 2, one line, no traceback, nothing written.

Snapshots are copies of the synthetic LLaVA snapshot (and, for the video and
audio sides, of Qwen2-Audio's, Qwen2-VL's and LLaVA-NeXT-Video's), damaged the
way real checkouts get damaged (truncated, corrupted, deleted, swapped files,
inconsistent ids, settings HF cannot work with); ports and options likewise.
Each snapshot entry runs through inspect, scaffold and verify; scaffold must
leave its output directory absent and verify its report files unwritten.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import invoke, scaffold_port, with_support

from mmport.sources import resolve


def _edit(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(directory: Path) -> None:
        path = directory / name
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return apply


def _older_layout(**image_settings) -> Callable[[Path], None]:
    """The image processor's settings (with ``image_settings``) moved out of
    processor_config.json into preprocessor_config.json, as releases before 5.x wrote them."""

    def apply(directory: Path) -> None:
        processor = json.loads((directory / "processor_config.json").read_text())
        image = {**processor.pop("image_processor"), **image_settings}
        (directory / "preprocessor_config.json").write_text(json.dumps(image))
        (directory / "processor_config.json").write_text(json.dumps(processor))

    return apply


def _write(name: str, text: str | bytes) -> Callable[[Path], None]:
    def apply(directory: Path) -> None:
        path = directory / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)

    return apply


def _delete(*names: str) -> Callable[[Path], None]:
    def apply(directory: Path) -> None:
        for name in names:
            (directory / name).unlink()

    return apply


def _swap(a: str, b: str) -> Callable[[Path], None]:
    def apply(directory: Path) -> None:
        first, second = (directory / a).read_bytes(), (directory / b).read_bytes()
        (directory / a).write_bytes(second)
        (directory / b).write_bytes(first)

    return apply


def _only_config(directory: Path) -> None:
    for path in directory.iterdir():
        if path.name != "config.json":
            path.unlink()


def _truncate(name: str) -> Callable[[Path], None]:
    def apply(directory: Path) -> None:
        path = directory / name
        path.write_text(path.read_text()[: len(path.read_text()) // 3])

    return apply


# (entry, damage, a fragment of the one line the user must see)
BROKEN_SNAPSHOTS = [
    ("config truncated", _truncate("config.json"), "is not valid JSON"),
    ("config not an object", _write("config.json", "[1, 2]"), "not a JSON object"),
    (
        "config not text",
        _write("config.json", b"\xff\xfe\x00garbage"),
        "cannot be read",
    ),
    (
        "config without model_type",
        _edit("config.json", lambda c: c.pop("model_type")),
        "names no model_type",
    ),
    (
        "config of an unknown model_type",
        _edit("config.json", lambda c: c.update(model_type="no_such_type")),
        "cannot load config.json",
    ),
    (
        "sub-config of the wrong type",
        _edit("config.json", lambda c: c.update(vision_config="clip")),
        "does not load",
    ),
    (
        "config embeds at a token HF never writes",
        _edit("config.json", lambda c: c.update(image_token_index=5)),
        "for an image; config.json and the tokenizer disagree",
    ),
    (
        "config of a text-only model",
        lambda d: (
            _write("config.json", '{"model_type": "gpt2"}')(d),
            _delete("processor_config.json")(d),
        ),
        "does not load",
    ),
    ("only config.json", _only_config, "does not load"),
    (
        "config and processor config swapped",
        _swap("config.json", "processor_config.json"),
        "names no model_type",
    ),
    ("tokenizer.json deleted", _delete("tokenizer.json"), "does not load"),
    ("tokenizer.json truncated", _truncate("tokenizer.json"), "does not load"),
    ("tokenizer.json empty", _write("tokenizer.json", ""), "does not load"),
    (
        "tokenizer.json holds the config",
        lambda d: shutil.copy(d / "config.json", d / "tokenizer.json"),
        "does not load",
    ),
    (
        "tokenizer_config.json corrupt",
        _write("tokenizer_config.json", "{"),
        "does not load",
    ),
    (
        "processor config corrupt",
        _write("processor_config.json", '{"a":'),
        "does not load",
    ),
    ("processor config deleted", _delete("processor_config.json"), "does not load"),
    (
        "processor class unknown",
        _edit(
            "processor_config.json",
            lambda c: c.update(processor_class="NoSuchProcessor"),
        ),
        "not a multimodal processor",
    ),
    (
        "image processor type unknown",
        _edit(
            "processor_config.json",
            lambda c: c["image_processor"].update(image_processor_type="Nope"),
        ),
        "does not load",
    ),
    (
        "image size of the wrong type",
        _edit(
            "processor_config.json",
            lambda c: c["image_processor"].update(size="big", crop_size="big"),
        ),
        "does not load",
    ),
    (
        # A setting of the processor's own, not its image processor's: the message says which.
        "a setting HF divides by zero",
        _edit("processor_config.json", lambda c: c.update(patch_size=0)),
        "check the processor's settings (LlavaProcessor, processor_config.json;",
    ),
    (
        # The older layout: the image processor's settings in preprocessor_config.json,
        # which the message names.
        "an image setting HF rejects, in preprocessor_config.json",
        _older_layout(size={"min_pixels": 3136, "max_pixels": 1003520}),
        "settings in processor_config.json or preprocessor_config.json",
    ),
    (
        "an image setting that leaves an image no tokens",
        _edit(
            "processor_config.json",
            lambda c: c["image_processor"].update(crop_size={"height": 0, "width": 0}),
        ),
        "writes no token for an ordinary",
    ),
]


@pytest.fixture(scope="module")
def llava_port(tmp_path_factory) -> Path:
    return scaffold_port("llava", tmp_path_factory.mktemp("llava-port"))


def _assert_user_error(result, fragment: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    assert fragment in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    ("entry", "damage", "fragment"),
    BROKEN_SNAPSHOTS,
    ids=[b[0] for b in BROKEN_SNAPSHOTS],
)
def test_broken_snapshot_is_one_line_and_exit_2(
    entry, damage, fragment, llava_port, tmp_path
) -> None:
    snapshot = tmp_path / "snapshot"
    shutil.copytree(resolve("llava").path, snapshot)
    damage(snapshot)
    _assert_user_error(invoke("inspect", str(snapshot)), fragment)
    out = tmp_path / "out"
    _assert_user_error(invoke("scaffold", str(snapshot), "-o", str(out)), fragment)
    assert not out.exists()
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    result = invoke(
        "verify",
        str(snapshot),
        "--port",
        str(llava_port),
        "--json",
        str(report),
        "--junit",
        str(junit),
    )
    _assert_user_error(result, fragment)
    assert not report.exists() and not junit.exists()


def test_a_processor_that_puts_no_item_into_the_prompt_is_one_line_and_exit_2(
    llava_port, tmp_path
) -> None:
    """Whisper's processor has a feature extractor but no audio token: the audio goes to the
    encoder of an encoder-decoder model, and every probe would compare text alone."""
    fragment = "WhisperProcessor has feature_extractor but names no image, video or audio placeholder"
    _assert_user_error(invoke("inspect", "whisper"), fragment)
    out = tmp_path / "out"
    _assert_user_error(invoke("scaffold", "whisper", "-o", str(out)), fragment)
    assert not out.exists()
    report = tmp_path / "r.json"
    verify = ("verify", "whisper", "--port", str(llava_port), "--json", str(report))
    _assert_user_error(invoke(*verify), fragment)
    assert not report.exists()


def _edit_sub(part: str, **values) -> Callable[[Path], None]:
    """Set ``values`` in the ``part`` (``feature_extractor``, ``video_processor``) of processor_config.json."""
    return _edit("processor_config.json", lambda c: c[part].update(values))


# Video and audio snapshots damaged in their own sub-processors and token ids:
# (entry, the family copied, damage, a fragment of the one line).
BROKEN_MEDIA_SNAPSHOTS = [
    (
        "audio token id HF never writes",
        "qwen2_audio",
        _edit("config.json", lambda c: c.update(audio_token_index=5)),
        "never writes it",
    ),
    (
        "feature extractor type unknown",
        "qwen2_audio",
        _edit_sub("feature_extractor", feature_extractor_type="NoSuchFeatureExtractor"),
        "does not load",
    ),
    (
        "feature extractor negative size",
        "qwen2_audio",
        _edit_sub("feature_extractor", feature_size=-3),
        "does not load",
    ),
    (
        "sampling rate zero",
        "qwen2_audio",
        _edit_sub("feature_extractor", sampling_rate=0),
        "refuses an ordinary audio",
    ),
    (
        "video processor type unknown",
        "qwen2_vl",
        _edit_sub("video_processor", video_processor_type="NoSuchVideoProcessor"),
        "does not load",
    ),
    (
        "video token id HF never writes",
        "llava_next_video",
        _edit("config.json", lambda c: c.update(video_token_index=5)),
        "never writes it",
    ),
]


@pytest.mark.parametrize(
    ("entry", "family", "damage", "fragment"),
    BROKEN_MEDIA_SNAPSHOTS,
    ids=[b[0] for b in BROKEN_MEDIA_SNAPSHOTS],
)
def test_broken_media_snapshot_is_one_line_and_exit_2(
    entry, family, damage, fragment, scaffolded, tmp_path
) -> None:
    snapshot = tmp_path / "snapshot"
    shutil.copytree(resolve(family).path, snapshot)
    damage(snapshot)
    _assert_user_error(invoke("inspect", str(snapshot)), fragment)
    out = tmp_path / "out"
    _assert_user_error(invoke("scaffold", str(snapshot), "-o", str(out)), fragment)
    assert not out.exists()
    report = tmp_path / "r.json"
    port = next(scaffolded(family).glob("*_processing.py"))
    _assert_user_error(
        invoke("verify", str(snapshot), "--port", str(port), "--json", str(report)),
        fragment,
    )
    assert not report.exists()


def _port_edit(old: str, new: str) -> Callable[[str], str]:
    def apply(source: str) -> str:
        assert old in source
        return source.replace(old, new)

    return apply


# (entry, the port file's text from the generated LLaVA port's, a fragment of the line)
BROKEN_PORTS = [
    ("syntax error", lambda s: "def f(:\n", "does not import"),
    (
        "imports a missing module",
        lambda s: "import no_such_module_here\n" + s,
        "does not import",
    ),
    (
        "raises on import",
        lambda s: "raise RuntimeError('refuses')\n",
        "does not import",
    ),
    ("null bytes", lambda s: "\x00", "does not import"),
    ("empty file", lambda s: "", "no subclass of BaseProcessingInfo"),
    ("no port classes", lambda s: "X = 1\n", "no subclass of BaseProcessingInfo"),
    (
        "two info classes",
        lambda s: (
            s
            + "\n\nclass A(LlavaProcessingInfo):\n    pass\n\n\nclass B(LlavaProcessingInfo):\n    pass\n"
        ),
        "2 subclasses",
    ),
    (
        "info that cannot be built",
        _port_edit(
            "class LlavaProcessingInfo(RequestSettingsProcessingInfo):\n",
            "class LlavaProcessingInfo(RequestSettingsProcessingInfo):\n    def __init__(self, ctx):\n        raise RuntimeError('no')\n\n",
        ),
        "fail to build",
    ),
]


@pytest.mark.parametrize(
    ("entry", "make", "fragment"), BROKEN_PORTS, ids=[b[0] for b in BROKEN_PORTS]
)
def test_broken_port_is_one_line_and_exit_2(
    entry, make, fragment, llava_port, tmp_path
) -> None:
    port = with_support(llava_port.parent, tmp_path) / "port.py"
    port.write_text(make(llava_port.read_text()))
    report = tmp_path / "r.json"
    _assert_user_error(
        invoke("verify", "llava", "--port", str(port), "--json", str(report)), fragment
    )
    assert not report.exists()


def test_a_port_copied_without_its_support_module_is_one_line_and_exit_2(
    llava_port, tmp_path
) -> None:
    # The processing module imports the support module scaffold writes beside it.
    port = tmp_path / llava_port.name
    port.write_text(llava_port.read_text())
    _assert_user_error(
        invoke("verify", "llava", "--port", str(port)), "no mm_request_support.py"
    )


def test_a_different_support_module_is_not_overwritten_without_force(
    llava_port, tmp_path
) -> None:
    out = with_support(llava_port.parent, tmp_path)
    support = out / "mm_request_support.py"
    support.write_text(support.read_text() + "# edited\n")
    _assert_user_error(
        invoke("scaffold", "paligemma", "-o", str(out)), "pass --force to overwrite"
    )
    assert support.read_text().endswith("# edited\n")
    assert not (out / "paligemma_processing.py").exists()


def _options(tmp_path: Path, port: Path) -> dict[str, tuple[list[str], str]]:
    (tmp_path / "a_directory").mkdir()
    (tmp_path / "a_file").write_text("")
    return {
        "no probes": (
            ["verify", "llava", "--port", str(port), "--probes", "0"],
            "--probes",
        ),
        "unknown backend": (
            ["verify", "llava", "--port", str(port), "--backend", "nope"],
            "unknown backend",
        ),
        "report into a missing directory": (
            [
                "verify",
                "llava",
                "--port",
                str(port),
                "--json",
                str(tmp_path / "no" / "r.json"),
            ],
            "does not exist",
        ),
        "report onto a directory": (
            [
                "verify",
                "llava",
                "--port",
                str(port),
                "--junit",
                str(tmp_path / "a_directory"),
            ],
            "is a directory",
        ),
        "port is a directory": (
            ["verify", "llava", "--port", str(tmp_path / "a_directory")],
            "is a directory",
        ),
        "model options without --model": (
            ["verify", "llava", "--port", str(port), "--tiny"],
            "add --model",
        ),
        "unknown dtype": (
            ["verify", "llava", "--port", str(port), "--model", "--dtype", "float8"],
            "unknown dtype",
        ),
        "output onto a file": (
            ["scaffold", "llava", "-o", str(tmp_path / "a_file")],
            "not a directory",
        ),
        "processor kwargs not JSON": (
            ["verify", "llava", "--port", str(port), "--processor-kwargs", "{crop"],
            "not valid JSON",
        ),
        "processor kwargs not an object": (
            ["verify", "llava", "--port", str(port), "--processor-kwargs", "[1]"],
            "JSON object",
        ),
        "processor kwarg unknown": (
            [
                "verify",
                "llava",
                "--port",
                str(port),
                "--processor-kwargs",
                '{"crop_sise": 3}',
            ],
            "does not take",
        ),
        "processor kwargs HF rejects": (
            [
                "verify",
                "llava",
                "--port",
                str(port),
                "--processor-kwargs",
                '{"crop_size": -3}',
            ],
            "not applicable to this checkpoint",
        ),
        "invalid hub id": (["inspect", "a/b/c"], "not a valid hub id"),
        "unknown option": (["inspect", "llava", "--frobnicate"], "No such option"),
        "unknown command": (["frobnicate"], "No such command"),
        "missing argument": (["inspect"], "Missing argument"),
    }


@pytest.mark.parametrize(
    "entry",
    [
        "no probes",
        "unknown backend",
        "report into a missing directory",
        "report onto a directory",
        "port is a directory",
        "model options without --model",
        "unknown dtype",
        "output onto a file",
        "processor kwargs not JSON",
        "processor kwargs not an object",
        "processor kwarg unknown",
        "processor kwargs HF rejects",
        "invalid hub id",
        "unknown option",
        "unknown command",
        "missing argument",
    ],
)
def test_bad_option_is_one_line_and_exit_2(entry, llava_port, tmp_path) -> None:
    args, fragment = _options(tmp_path, llava_port)[entry]
    _assert_user_error(invoke(*args), fragment)


def test_internal_error_is_one_line_and_exit_3(monkeypatch, tmp_path) -> None:
    # A fault injected into mmport's own analysis (not the user's input) is a bug
    # of mmport's: one line naming the step, exit 3, and --debug shows it whole.
    import mmport.analyzers

    def broken(snapshot):
        raise KeyError("an analyzer bug")

    monkeypatch.setattr(mmport.analyzers, "analyze", broken)
    result = invoke("scaffold", "llava", "-o", str(tmp_path / "out"))
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert (
        "internal error while analysing llava" in result.stderr
        and "--debug" in result.stderr
    )
    assert (
        len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    )
    with pytest.raises(KeyError):
        invoke("--debug", "scaffold", "llava", "-o", str(tmp_path / "out"))
