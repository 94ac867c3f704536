"""A tower vLLM ships no module for, kept as HF's module, and a path HF writes inline.

vLLM's own Qwen2-Audio builds HF's ``Qwen2AudioEncoder`` as a module of its
class and calls it as HF's forward calls it: vLLM has no encoder for it. A
generated class does the same where the tower's class has no vLLM
equivalent: the tower is HF's class, built from its sub-config by the
class's plain constructor (under the dtype vLLM builds the model in) and
imported from the family's package; the file and ``mmport inspect`` say why.

The features of such a path are HF's lines, as the class's own method:
where HF computes them inside ``forward``
(:mod:`mmport.analyzers.inlinefeatures`), those lines become
``_<modality>_features``, every line with its HF source, the functions they
call imported from transformers' shared utilities (the attention mask
helpers) rather than copied. Nothing is replaced in them: the tower is the
module HF's lines call.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from typing import Any

import libcst as cst

from mmport.analyzers.copiedpath import is_docstring, with_helpers
from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.language import config_argument, sub_config
from mmport.analyzers.nativepath import ConfigValue, path_parameters
from mmport.analyzers.sourcefile import find_method
from mmport.errors import AnalysisError
from mmport.spec import (
    EncoderModule,
    FeaturePath,
    Source,
    VllmFeaturePath,
    VllmTowerBuild,
)

__all__ = ["EXAMPLES", "inline_path", "kept_method_path", "kept_tower", "tower_of"]

# The auto class HF builds a tower through from its sub-config.
_AUTO_MODEL = "AutoModel.from_config"


def _built_class(module: EncoderModule, namespace: dict[str, Any], config: Any) -> type:
    """The class HF's line builds ``module`` as: named, or the one ``AutoModel`` maps
    the sub-config's class to."""
    call = cst.parse_expression(module.code)
    sub = config_argument(call)
    if not isinstance(call, cst.Call) or sub is None:
        raise AnalysisError(f"HF builds {module.attr} from no config ({module.source})")
    func = cst.Module([]).code_for_node(call.func)
    if func == _AUTO_MODEL:
        from transformers import AutoModel

        sub_cfg = sub_config(config, sub)
        mapping = AutoModel._model_mapping  # transformers' own config → class table
        if type(sub_cfg) not in mapping:
            raise AnalysisError(
                f"AutoModel maps no class to {type(sub_cfg).__name__} ({module.source})"
            )
        built = mapping[type(sub_cfg)]
        # A tuple where several classes take the config: AutoModel builds the first.
        first = built[0] if isinstance(built, tuple) else built
        if not isinstance(first, type):
            raise AnalysisError(f"AutoModel builds no class for {module.attr}")
        return first
    # ``Class(config.x)`` or ``Class._from_config(config.x)``: the class named.
    cls = namespace.get(func.removesuffix("._from_config"))
    if not isinstance(cls, type):
        raise AnalysisError(f"{func} is no class of HF's module ({module.source})")
    return cls


def _import_path(cls: type) -> str:
    """Where the port imports ``cls`` from: its family's package where that exports it
    (``transformers.models.qwen2_audio``, as vLLM's own ports import it), else the
    module defining it."""
    module = cls.__module__
    package = module.rpartition(".")[0]
    if package.startswith("transformers.models."):
        try:
            exported = getattr(importlib.import_module(package), cls.__name__, None)
        except ImportError:
            exported = None
        if exported is cls:
            return f"{package}.{cls.__name__}"
    return f"{module}.{cls.__name__}"


def kept_tower(module: EncoderModule, inner: type[Any], config: Any) -> VllmTowerBuild:
    """HF's tower at ``module`` kept as HF's module: the class, its import, and why."""
    if module.vllm_equivalent:
        raise AnalysisError(
            f"vLLM ships {module.vllm_equivalent} for {module.attr}; it is not kept as HF's"
        )
    namespace = vars(sys.modules[inner.__module__])
    cls = _built_class(module, namespace, config)
    sub = config_argument(cst.parse_expression(module.code)) or ()
    return VllmTowerBuild(
        attr=module.attr,
        vllm_class=_import_path(cls),
        config_attr="".join(f".{name}" for name in sub),
        select_layers="",
        post_norm=True,
        source=module.source,
        kept=(
            f"no vLLM module stands in for HF's {cls.__name__} (mmport's table of "
            "vLLM's encoders): HF's, built and called as a module"
        ),
    )


def tower_of(
    modality: str, reads: Sequence[str], modules: Sequence[EncoderModule]
) -> EncoderModule:
    """The module HF's ``modality`` lines read (``reads``: attributes of ``self``)
    that HF builds from a sub-config of its own: the path's tower."""
    towers = [
        m
        for m in modules
        if m.attr in reads and (config_argument(cst.parse_expression(m.code)) or ())
    ]
    if len(towers) != 1:
        raise AnalysisError(
            f"HF's {modality} lines call {len(towers)} modules built from "
            "sub-configs; the class keeps one tower"
        )
    return towers[0]


def kept_method_path(
    inner: type[Any],
    method: str,
    modality: str,
    fields: Sequence[str],
    modules: Sequence[EncoderModule],
    config: Any,
    output: str,
) -> tuple[VllmFeaturePath, VllmTowerBuild]:
    """HF's ``inner.<method>`` whole as the class's ``_<modality>_features``, on HF's
    tower: a parameter HF fills from the config is read from ``self.config`` at the
    top, and HF's keyword arguments are none. Returns the path, whose caller reads
    the field ``output`` of what the method returns, and its tower, kept."""
    found = find_method(inner, method)
    if found is None:
        raise AnalysisError(
            f"{inner.__name__}.{method} is not in transformers' sources"
        )
    parsed, node = found
    tower_input, *others = fields
    env = path_parameters(node, tower_input, config, others)
    name = f"_{modality}_features"
    body = [stmt for stmt in node.body.body if not is_docstring(stmt)]  # type: ignore[arg-type]
    if body:  # the blank line HF leaves after its docstring goes with it
        body[0] = body[0].with_changes(leading_lines=())
    code = cst.Module([]).code_for_node(node.body.with_changes(body=body))
    prelude = []
    star = node.params.star_kwarg
    for param, value in env.items():
        if not re.search(rf"\b{param}\b", code):
            continue  # a parameter the body never reads needs no value
        if isinstance(star, cst.Param) and param == star.name.value:
            prelude.append(f"{param} = {{}}  # HF's keyword arguments: none handed on")
        elif isinstance(value, ConfigValue):
            on = "self." if value.code.startswith("config.") else ""
            prelude.append(f"{param} = {on}{value.code}")
        elif value is None:
            prelude.append(f"{param} = None")
    lines = [f"def {name}(self, {', '.join(fields)}):"]
    text = "\n".join(lines + [f"    {line}" for line in prelude]) + code
    copied = with_helpers(
        inner, name, text, fields, parsed.source(node), import_shared=True
    )
    tower = tower_of(modality, copied.reads, modules)
    path = VllmFeaturePath(
        modality=modality,
        method=method,
        source=parsed.source(node),
        tower=tower.attr,
        tower_input=tower_input,
        layers="",
        strategy="",
        steps=(),
        tower_line=parsed.source(node),
        copied=copied,
        output_field=output,
    )
    return path, kept_tower(tower, inner, config)


def inline_path(
    inner: type[Any], path: FeaturePath, modules: Sequence[EncoderModule], config: Any
) -> tuple[VllmFeaturePath, VllmTowerBuild]:
    """HF's inline lines of ``path`` as the class's method ``_<modality>_features``,
    and the tower they call, kept (:func:`kept_tower`)."""
    inline = path.inline
    if inline is None:
        raise AnalysisError(f"HF computes the {path.modality} features in a method")
    tower = tower_of(path.modality, inline.self_reads, modules)
    name = f"_{path.modality}_features"
    lines = [f"def {name}(self, {', '.join(inline.params)}):"]
    for code, source, cited in inline.lines:
        if cited:
            lines.append(f"    # HF: {source}")
        lines += [f"    {line}" for line in code.splitlines()]
    lines.append(f"    return {inline.result}")
    text = "\n".join(lines) + "\n"
    copied = with_helpers(
        inner, name, text, inline.params, inline.source, import_shared=True
    )
    first = inline.lines[0][1] if inline.lines else inline.source
    feature_path = VllmFeaturePath(
        modality=path.modality,
        method="forward",
        source=inline.source,
        tower=tower.attr,
        tower_input=inline.params[0],
        layers="",
        strategy="",
        steps=(),
        tower_line=first,
        copied=copied,
        # HF's forward places every item's features at once, its rows joined.
        joins_items=True,
    )
    return feature_path, kept_tower(tower, inner, config)


_SNIPPET = """
from transformers import PretrainedConfig


class AudioConfig(PretrainedConfig):
    model_type = "example_audio"


class Config(PretrainedConfig):
    model_type = "example"

    def __init__(self, audio_config=None, **kwargs):
        self.audio_config = AudioConfig()
        super().__init__(**kwargs)


class AudioEncoder:
    pass


class AudioModel:
    def __init__(self, config):
        self.audio_tower = AudioEncoder(config.audio_config)
        self.projector = Projector(config)
"""


def _kept(snippet: Any, line: str) -> tuple[str, str, str]:
    module = EncoderModule(
        "audio_tower", line, Source("example.py", 22), vllm_equivalent=""
    )
    tower = kept_tower(module, snippet.AudioModel, snippet.Config())
    return tower.class_name, tower.config_attr, tower.kept


_METHOD = """
def merge_with_config_defaults(func):
    return func


class VisionTower:
    pass


class VisionModel:
    def __init__(self, config):
        self.visual = VisionTower(config.vision_config)
        self.projector = Projector(config)

    @merge_with_config_defaults
    def get_image_features(self, pixel_values, grid, vision_feature_layer=None, **kwargs):
        \"\"\"HF's docstring.\"\"\"
        outputs = self.visual(pixel_values, grid=grid, **kwargs)
        outputs.pooler_output = self.projector(outputs.hidden_states[vision_feature_layer])
        return outputs
"""


def _method(snippet: Any) -> tuple[str, tuple[str, ...], str]:
    modules = (
        EncoderModule("visual", "VisionTower(config.vision_config)", Source("x", 11)),
        EncoderModule("projector", "Projector(config)", Source("x", 12)),
    )
    config = type("Config", (), {"vision_feature_layer": -2})()
    path, tower = kept_method_path(
        snippet.VisionModel,
        "get_image_features",
        "image",
        ("pixel_values", "grid"),
        modules,
        config,
        "pooler_output",
    )
    assert path.copied is not None
    lines = tuple(line.strip() for line in path.copied.code.splitlines()[:4])
    return tower.attr, lines, path.read_output


EXAMPLES = [
    valid(
        "hfs_method_on_its_kept_tower_is_copied_whole_its_defaults_read_first",
        _METHOD,
        _method,
        (
            "visual",
            (
                "def _image_features(self, pixel_values, grid):",
                "vision_feature_layer = self.config.vision_feature_layer",
                "kwargs = {}  # HF's keyword arguments: none handed on",
                "outputs = self.visual(pixel_values, grid=grid, **kwargs)",
            ),
            ".pooler_output",
        ),
    ),
    valid(
        "a_tower_vllm_ships_no_module_for_is_hfs_class_from_its_sub_config",
        _SNIPPET,
        lambda snippet: _kept(snippet, "AudioEncoder(config.audio_config)"),
        (
            "AudioEncoder",
            ".audio_config",
            "no vLLM module stands in for HF's AudioEncoder (mmport's table of vLLM's "
            "encoders): HF's, built and called as a module",
        ),
    ),
    invalid(
        "a_tower_built_from_no_config_refuses",
        _SNIPPET,
        lambda snippet: _kept(snippet, "AudioEncoder(width=4)"),
        refusal=AnalysisError,
        match="HF builds audio_tower from no config",
    ),
]
