"""What HF's text model takes from the encoders beside the embeddings (Qwen3-VL's deepstack).

vLLM's language model takes a prompt's embeddings, the items' rows placed at
their tokens, and nothing else of the items. Some HF models hand their text
model more: Qwen3-VL gives it ``deepstack_visual_embeds`` (features of early
vision layers, added inside the first decoder layers) and ``visual_pos_masks``;
Mllama its ``cross_attention_states``. A port that embeds such a modality and
builds vLLM's plain CausalLM drops that input and silently differs from HF.

This follows the values of the holder's ``forward`` from each feature method's
call (``self.get_image_features(...)``) along the statements that read them,
to the keyword arguments of the call to the text model that are none of the
inputs every text model takes. Each such argument names the modalities its
value comes from; a value that comes from none (Qwen4's ``ple_input_ids``,
from the prompt's tokens) is the text model's own business and vLLM's model
computes it itself.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from mmport.analyzers.examples import valid
from mmport.analyzers.sourcefile import find_method, self_call
from mmport.spec import Source

__all__ = ["EXAMPLES", "side_inputs"]

# The text model's own inputs, which vLLM's language model takes or computes itself.
_TEXT_INPUTS = frozenset(
    {
        "input_ids",
        "inputs_embeds",
        "attention_mask",
        "position_ids",
        "past_key_values",
        "use_cache",
        "cache_position",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "labels",
        "logits_to_keep",
    }
)


def _key(node: cst.BaseExpression) -> str | None:
    """The name a value is kept under: ``x``, or ``d[image]`` for ``d["image"]``."""
    if isinstance(node, cst.Name):
        return node.value
    if (
        isinstance(node, cst.Subscript)
        and isinstance(node.value, cst.Name)
        and len(node.slice) == 1
        and isinstance(node.slice[0].slice, cst.Index)
        and isinstance(node.slice[0].slice.value, cst.SimpleString)
        and isinstance(key := node.slice[0].slice.value.evaluated_value, str)
    ):
        return f"{node.value.value}[{key}]"
    return None


class _Reads(cst.CSTVisitor):
    """The kept values and feature methods an expression reads."""

    def __init__(self, methods: dict[str, str]) -> None:
        self.methods = methods  # feature method name -> modality
        self.keys: list[str] = []
        self.modalities: set[str] = set()

    def visit_Subscript(self, node: cst.Subscript) -> bool:
        key = _key(node)
        if key is None:
            return True
        self.keys += [key, key.split("[")[0]]
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.keys.append(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        method = self_call(node)
        if method in self.methods:
            self.modalities.add(self.methods[method])


class _Flow(cst.CSTVisitor):
    """Statement by statement, the modalities each kept value comes from, and the
    text model's call."""

    def __init__(self, methods: dict[str, str], language_attr: str) -> None:
        self.methods = methods
        self.language_attr = language_attr
        self.origins: dict[str, set[str]] = {}
        self.calls: list[cst.Call] = []

    def _origin(self, node: cst.CSTNode) -> set[str]:
        reads = _Reads(self.methods)
        node.visit(reads)
        found = set(reads.modalities)
        for key in reads.keys:
            # What reaches the text model through its own inputs (the embeddings the
            # features were placed in) is vLLM's to do: a mask HF derives from
            # inputs_embeds carries no modality of its own.
            if key not in _TEXT_INPUTS:
                found |= self.origins.get(key, set())
        return found

    def _keep(self, target: cst.BaseExpression, origin: set[str]) -> None:
        if isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self._keep(element.value, origin)
            return
        key = _key(target)
        if key is not None:
            self.origins.setdefault(key, set()).update(origin)

    def visit_Assign(self, node: cst.Assign) -> None:
        origin = self._origin(node.value)
        for target in node.targets:
            self._keep(target.target, origin)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._keep(node.target, self._origin(node.value))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._keep(node.target, self._origin(node.value))

    def visit_For(self, node: cst.For) -> None:
        self._keep(node.target, self._origin(node.iter))

    def visit_Call(self, node: cst.Call) -> None:
        if self_call(node) == self.language_attr:
            self.calls.append(node)


def side_inputs(
    holder: type[Any], language_attr: str, methods: dict[str, str]
) -> dict[str, tuple[tuple[str, ...], Source]]:
    """Per modality, the text-model inputs of ``holder``'s ``forward`` that come from its
    features beyond the embeddings, and the line of the text model's call.

    ``methods`` maps each feature method (``get_image_features``) to its modality.
    """
    found = find_method(holder, "forward")
    if found is None:
        return {}
    parsed, forward = found
    flow = _Flow(methods, language_attr)
    forward.body.visit(flow)
    side: dict[str, tuple[tuple[str, ...], Source]] = {}
    for call in flow.calls:
        for arg in call.args:
            if arg.keyword is None or arg.keyword.value in _TEXT_INPUTS:
                continue
            for modality in flow._origin(arg.value):
                names, _ = side.get(modality, ((), parsed.source(call)))
                side[modality] = ((*names, arg.keyword.value), parsed.source(call))
    # In the order of ``methods`` (a set's order changes from run to run).
    order = list(methods.values())
    return dict(sorted(side.items(), key=lambda item: order.index(item[0])))


_DEEPSTACK = """
class DeepstackModel:
    def get_image_features(self, pixel_values):
        return self.visual(pixel_values)

    def get_audio_features(self, input_features):
        return self.audio_tower(input_features)

    def forward(self, input_ids, pixel_values=None, input_features=None):
        inputs_embeds = self.embed(input_ids)
        outputs = {}
        outputs["image"] = self.get_image_features(pixel_values)
        outputs["audio"] = self.get_audio_features(input_features)
        deepstack = outputs["image"].deepstack_features
        audio_embeds = outputs["audio"].pooler_output
        inputs_embeds = inputs_embeds.masked_scatter(input_ids == 5, audio_embeds)
        image_mask = self.get_placeholder_mask(input_ids, inputs_embeds=inputs_embeds)
        layer_ids = input_ids * 2
        return self.language_model(
            inputs_embeds=inputs_embeds,
            deepstack_visual_embeds=[d for d in deepstack],
            visual_pos_masks=image_mask,
            ple_input_ids=layer_ids,
        )
"""

EXAMPLES = [
    valid(
        "an_input_from_the_image_features_beside_the_embeddings",
        _DEEPSTACK,
        lambda snippet: {
            modality: names
            for modality, (names, _) in side_inputs(
                snippet.DeepstackModel,
                "language_model",
                {"get_image_features": "image", "get_audio_features": "audio"},
            ).items()
        },
        {"image": ("deepstack_visual_embeds",)},
    ),
]
