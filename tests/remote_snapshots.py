"""Remote-code snapshots built from real code, the shape hub repos have.

``remote_snapshot("llava", directory, sentinel)`` copies the family's synthetic
snapshot, then its configuration / processing / image- and video-processing
modules from the installed transformers into the directory, renamed (classes
``Acme<Name>``, model_type ``acme_<model_type>``), with relative imports of
transformers made absolute and ``auto_map`` entries pointing at them. Each
copied module appends its name to ``sentinel`` when it runs, so a test can
tell whether anything from the snapshot was executed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import transformers

from mmport.sources import resolve

PREFIX = "Acme"
# Module kinds a hub repo ships beside its weights, and the auto class each registers.
_KINDS = {
    "configuration": "AutoConfig",
    "processing": "AutoProcessor",
    "image_processing": "AutoImageProcessor",
    "video_processing": "AutoVideoProcessor",
}
_CLASS = re.compile(r"^class (\w+)\b", re.MULTILINE)


def _family_modules(model_type: str) -> dict[str, Path]:
    """The family's own modules of each kind in the installed transformers."""
    root = Path(transformers.__file__).parent / "models" / model_type
    found = {kind: root / f"{kind}_{model_type}.py" for kind in _KINDS}
    return {kind: path for kind, path in found.items() if path.is_file()}


def _absolute_imports(source: str, model_type: str, renamed: str) -> str:
    """Relative imports of transformers made absolute; sibling modules keep theirs, renamed."""
    source = re.sub(r"from \.\.\.(\w)", r"from transformers.\1", source)
    source = re.sub(r"from \.\.(\w)", r"from transformers.models.\1", source)
    return re.sub(rf"from \.(\w+)_{model_type}\b", rf"from .\1_{renamed}", source)


def _sentinel_line(sentinel: Path) -> str:
    return f"open({str(sentinel)!r}, 'a').write(__name__ + '\\n')  # records that this module ran\n"


def remote_snapshot(
    model_type: str,
    directory: Path,
    sentinel: Path,
    *,
    kinds: tuple[str, ...] = tuple(_KINDS),
) -> Path:
    """A remote-code twin of ``model_type``'s synthetic snapshot in ``directory`` (see the module docstring)."""
    shutil.copytree(resolve(model_type).path, directory)
    renamed = f"acme_{model_type}"
    modules = {
        kind: path
        for kind, path in _family_modules(model_type).items()
        if kind in kinds
    }
    sources = {kind: path.read_text() for kind, path in modules.items()}
    classes = sorted(
        {name for text in sources.values() for name in _CLASS.findall(text)},
        key=len,
        reverse=True,
    )
    rename = (
        re.compile(r"\b(" + "|".join(map(re.escape, classes)) + r")\b")
        if classes
        else None
    )
    auto_map: dict[str, str] = {}
    for kind, text in sources.items():
        text = _absolute_imports(text, model_type, renamed)
        if rename:
            text = rename.sub(lambda m: PREFIX + m.group(1), text)
        text = text.replace(f'model_type = "{model_type}"', f'model_type = "{renamed}"')
        # After the module docstring and __future__ imports, which must come first.
        text = (
            _sentinel_line(sentinel) + text
            if "from __future__" not in text
            else text + "\n" + _sentinel_line(sentinel)
        )
        module = f"{kind}_{renamed}"
        (directory / f"{module}.py").write_text(text)
        main_class = _main_class(kind, _CLASS.findall(sources[kind]))
        if main_class:
            auto_map[_KINDS[kind]] = f"{module}.{PREFIX}{main_class}"
    _point_configs_at(directory, model_type, renamed, auto_map)
    return directory


def _main_class(kind: str, classes: list[str]) -> str | None:
    """The class an auto class loads from a module of ``kind`` (e.g. ``LlavaProcessor``)."""
    suffix = {
        "configuration": "Config",
        "processing": "Processor",
        "image_processing": "ImageProcessor",
        "video_processing": "VideoProcessor",
    }[kind]
    matching = [
        name for name in classes if name.endswith(suffix) and "Kwargs" not in name
    ]
    # The family's top-level config is the one without a sub-model prefix (Vision/Text).
    return min(matching, key=len) if matching else None


def _point_configs_at(
    directory: Path, model_type: str, renamed: str, auto_map: dict[str, str]
) -> None:
    """config.json and the processor configs name the copied classes, as a hub repo's do."""
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config["model_type"] = renamed
    config["architectures"] = [
        PREFIX + arch for arch in config.get("architectures") or []
    ]
    config["auto_map"] = {k: v for k, v in auto_map.items() if k == "AutoConfig"}
    if "AutoProcessor" in auto_map:
        config["auto_map"]["AutoProcessor"] = auto_map["AutoProcessor"]
    config_path.write_text(json.dumps(config, indent=2))
    for name in (
        "processor_config.json",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
        "tokenizer_config.json",
    ):
        path = directory / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        _rename_classes(data, auto_map)
        path.write_text(json.dumps(data, indent=2))


def _rename_classes(data: dict, auto_map: dict[str, str], *, top: bool = True) -> None:
    """Point class-naming fields at the copied classes and add ``auto_map``, here and in nested processor configs."""
    copied = {value.rsplit(".", 1)[1][len(PREFIX) :] for value in auto_map.values()}
    names_class = False
    for key, value in list(data.items()):
        if (
            key.endswith(("_class", "_type"))
            and isinstance(value, str)
            and value.removesuffix("Fast") in copied
        ):
            data[key] = PREFIX + value.removesuffix("Fast")
            names_class = True
        elif isinstance(value, dict):
            _rename_classes(value, auto_map, top=False)
    if top or names_class:
        data["auto_map"] = {k: v for k, v in auto_map.items() if k != "AutoConfig"}


# A processor as older hub repos write it: the prompt built in ``__call__`` by
# string replacement, sub-processors named by ``*_class`` attributes, no 5.x hooks.
OLD_STYLE_PROCESSOR = """
from transformers.feature_extraction_utils import BatchFeature
from transformers.processing_utils import ProcessorMixin


class AcmeOldProcessor(ProcessorMixin):
    attributes = ["image_processor", "tokenizer"]
    image_processor_class = "AutoImageProcessor"
    tokenizer_class = "AutoTokenizer"

    def __init__(self, image_processor=None, tokenizer=None, patch_size=14, image_token="<image>", chat_template=None, **kwargs):
        self.patch_size = patch_size
        self.image_token = image_token
        super().__init__(image_processor, tokenizer, chat_template=chat_template)

    def __call__(self, images=None, text=None, return_tensors=None, **kwargs):
        if isinstance(text, str):
            text = [text]
        image_inputs = {}
        if images is not None:
            image_inputs = self.image_processor(images, return_tensors=return_tensors)
            height, width = image_inputs["pixel_values"].shape[-2:]
            num_image_tokens = (height // self.patch_size) * (width // self.patch_size)
            text = [sample.replace(self.image_token, self.image_token * num_image_tokens) for sample in text]
        text_inputs = self.tokenizer(text, return_tensors=return_tensors)
        return BatchFeature(data={**text_inputs, **image_inputs})
"""


def old_style_snapshot(directory: Path, sentinel: Path) -> Path:
    """LLaVA's synthetic snapshot with its processor replaced by :data:`OLD_STYLE_PROCESSOR` (remote code)."""
    shutil.copytree(resolve("llava").path, directory)
    (directory / "processing_acme_old.py").write_text(
        _sentinel_line(sentinel) + OLD_STYLE_PROCESSOR
    )
    path = directory / "processor_config.json"
    data = json.loads(path.read_text())
    data["processor_class"] = "AcmeOldProcessor"
    data["auto_map"] = {"AutoProcessor": "processing_acme_old.AcmeOldProcessor"}
    for key in ("num_additional_image_tokens", "vision_feature_select_strategy"):
        data.pop(
            key, None
        )  # LLaVA's; the old processor takes only patch_size and image_token
    path.write_text(json.dumps(data, indent=2))
    return directory
