"""How HF's feature paths call a tower, and whether vLLM's module can answer them.

A generated class runs HF's own feature methods (``get_image_features``) on
the modules it builds. vLLM's module for a tower (SigLIP's) takes the same
input but returns one tensor, where HF's returns an output object whose
fields the path reads. vLLM's module can stand in for HF's when every use of
the tower in the methods the class runs is a call whose output the path
reads only for fields one way of calling vLLM's module gives: its plain call
(SigLIP's ``last_hidden_state``) or every layer's output side by side
(``hidden_states``), with arguments vLLM's forward takes with HF's meaning:

    image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
    selected_image_feature = image_outputs.last_hidden_state
    image_outputs.pooler_output = self.multi_modal_projector(selected_image_feature)
    return image_outputs

The output may be returned, when the field the port reads from it is one the
method writes (``pooler_output``) or one vLLM's module gives. HF's own
``**kwargs`` may be handed on only when no field of the item reaches them:
every field is a named parameter of the method (the port calls it with the
item's fields alone), and the method puts into them only parameters the port
leaves None. A branch on such a parameter (``if image_sizes is not None:``)
never runs in the port and is not read. Anything else (another keyword,
``self.vision_tower.patch_size``, the output handed on whole) keeps HF's
module, and the reason says what HF's path does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from mmport.analyzers.examples import valid
from mmport.analyzers.sourcefile import is_self_attr
from mmport.analyzers.vllmencoders import VLLM_ENCODERS
from mmport.spec import VllmEncoder

__all__ = ["EXAMPLES", "TowerCalls", "tower_calls"]

# Keywords of HF's call that change nothing a path reads: the output is an object either way.
_INERT_KEYWORDS = frozenset({"return_dict"})


@dataclass(frozen=True)
class TowerCalls:
    """HF's calls of a tower vLLM's module can answer: the keywords they pass (HF's
    names, which vLLM's forward takes), the fields of HF's output vLLM's module
    gives, and whether by every layer's output (``layered``) or its plain call."""

    keywords: tuple[str, ...]
    fields: tuple[str, ...]
    layered: bool


class _Refused(Exception):
    """A use of the tower vLLM's module cannot answer as HF's does (the reason)."""


class _Uses(cst.CSTVisitor):
    """Every ``self.<attr>`` of one method, and the calls of it, with what receives their output."""

    def __init__(
        self, attr: str, attributes: Sequence[str], unset: frozenset[str] = frozenset()
    ) -> None:
        self.attr = attr
        self.attributes = attributes
        self.unset = unset  # parameters None when the port calls the method
        self.reads = 0
        self.properties = 0
        self.calls: list[cst.Call] = []
        self.kept: dict[int, str] = {}  # id(call) -> the name its output is kept under
        self.fields: dict[int, str] = {}  # id(call) -> the field read straight off it

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if is_self_attr(node, self.attr):
            self.reads += 1
        elif is_self_attr(node.value, self.attr) and node.attr.value in self.attributes:
            self.properties += 1
        elif isinstance(node.value, cst.Call) and is_self_attr(
            node.value.func, self.attr
        ):
            self.fields[id(node.value)] = node.attr.value

    def visit_Call(self, node: cst.Call) -> None:
        if is_self_attr(node.func, self.attr):
            self.calls.append(node)

    def visit_If(self, node: cst.If) -> bool:
        # ``if image_sizes is not None:`` on a parameter the port leaves None: never runs.
        test = node.test
        dead = (
            isinstance(test, cst.Comparison)
            and isinstance(test.left, cst.Name)
            and test.left.value in self.unset
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.IsNot)
            and isinstance(test.comparisons[0].comparator, cst.Name)
            and test.comparisons[0].comparator.value == "None"
        )
        if dead and node.orelse is not None:
            node.orelse.visit(self)
        return not dead

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if (
            len(node.targets) == 1
            and isinstance(target, cst.Name)
            and isinstance(node.value, cst.Call)
            and is_self_attr(node.value.func, self.attr)
        ):
            self.kept[id(node.value)] = target.value


class _OutputUses(cst.CSTVisitor):
    """How a method uses the name a tower's output is kept under: its fields read and
    written, whether it is returned, and every mention of the name (``names``), so
    that any other use (handed on, reassigned) shows as one unaccounted for."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.read: list[str] = []
        self.written: list[str] = []
        self.returned = False
        self.names = 0
        self._targets: set[int] = set()

    def _ours(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Name) and node.value == self.name

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Attribute) and self._ours(
                target.target.value
            ):
                self.written.append(target.target.attr.value)
                self._targets.add(id(target.target))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self._ours(node.value) and id(node) not in self._targets:
            self.read.append(node.attr.value)

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None and self._ours(node.value):
            self.returned = True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.names += 1


def _arguments(
    call: cst.Call, encoder: VllmEncoder, star_kwargs: str
) -> tuple[str, ...]:
    """The keywords of HF's ``call`` vLLM's forward takes; refused for any other argument."""
    positional = [a for a in call.args if not a.keyword and not a.star]
    passed = {a.keyword.value: a for a in call.args if a.keyword}
    starred = [a for a in call.args if a.star]
    if len(positional) + (encoder.first in passed) != 1 or len(positional) > 1:
        raise _Refused(f"HF calls it with other positional inputs than {encoder.first}")
    for arg in starred:
        if arg.star != "**" or not (
            isinstance(arg.value, cst.Name) and arg.value.value == star_kwargs
        ):
            raise _Refused("HF hands it arguments unpacked from elsewhere")
    passed.pop(encoder.first, None)
    unknown = sorted(set(passed) - _INERT_KEYWORDS - set(encoder.keywords))
    if unknown:
        raise _Refused(
            f"HF calls it with {', '.join(unknown)}, which vLLM's module does not take"
        )
    return tuple(k for k in passed if k in encoder.keywords)


def _method_calls(
    method: cst.FunctionDef,
    attr: str,
    encoder: VllmEncoder,
    fields: Sequence[str] | None,
    output: str,
    hf_takes: frozenset[str] | None = None,
) -> tuple[tuple[str, ...], list[cst.Call], list[tuple[str, str]]]:
    """The keywords ``method``'s calls of ``self.<attr>`` pass, the calls, and the fields
    of their output it needs, each ``(field, how it needs it)``; refused for any
    other use."""
    uses = _Uses(attr, encoder.readable, _unset(method, fields))
    method.body.visit(uses)
    if uses.reads != len(uses.calls) + uses.properties:
        raise _Refused(
            f"{method.name.value} reads self.{attr} otherwise than calling it"
        )
    star = method.params.star_kwarg
    star_kwargs = star.name.value if isinstance(star, cst.Param) else ""
    if uses.calls and star_kwargs and fields is not None:
        _check_kwargs(method, star_kwargs, fields, hf_takes)
    keywords: list[str] = []
    needed: list[tuple[str, str]] = []
    for call in uses.calls:
        keywords += _arguments(call, encoder, star_kwargs)
        if id(call) in uses.fields:
            field = uses.fields[id(call)]
            needed.append((field, f"{method.name.value} reads its output's {field}"))
            continue
        name = uses.kept.get(id(call))
        if name is None:
            raise _Refused(f"{method.name.value} uses its output whole")
        needed += _output_needs(method, name, output)
    return tuple(keywords), uses.calls, needed


class _KwargsWrites(cst.CSTVisitor):
    """``kwargs["key"] = value`` lines of a method: (key, value) for each."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.writes: list[tuple[str, cst.BaseExpression]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            sub = target.target
            if (
                isinstance(sub, cst.Subscript)
                and isinstance(sub.value, cst.Name)
                and sub.value.value == self.name
            ):
                index = sub.slice[0].slice if len(sub.slice) == 1 else None
                key = (
                    index.value.evaluated_value
                    if isinstance(index, cst.Index)
                    and isinstance(index.value, cst.SimpleString)
                    else None
                )
                self.writes.append((str(key), node.value))


def _unset(method: cst.FunctionDef, fields: Sequence[str] | None) -> frozenset[str]:
    """The parameters of ``method`` that are None when the port calls it with the item's
    ``fields`` alone (a default of None, no field of that name); none where not known."""
    if fields is None:
        return frozenset()
    params = [*method.params.params, *method.params.kwonly_params]
    return frozenset(
        p.name.value
        for p in params
        if isinstance(p.default, cst.Name)
        and p.default.value == "None"
        and p.name.value not in fields
    )


def _check_kwargs(
    method: cst.FunctionDef,
    star_kwargs: str,
    fields: Sequence[str],
    hf_takes: frozenset[str] | None = None,
) -> None:
    """Refused where the item's fields could reach the tower through HF's ``**kwargs``:
    one is no named parameter, or the method puts one into them (LLaVA puts its
    ``image_sizes`` parameter in, which is no field of its items, so None there)."""
    params = [*method.params.params, *method.params.kwonly_params]
    named = {p.name.value for p in params}
    leaked = [
        f for f in fields if f not in named and (hf_takes is None or f in hf_takes)
    ]
    if leaked:
        raise _Refused(
            f"{method.name.value} hands the item's {', '.join(leaked)} on through **{star_kwargs}"
        )
    unset = _unset(method, fields)
    writes = _KwargsWrites(star_kwargs)
    method.body.visit(writes)
    for key, value in writes.writes:
        if not (isinstance(value, cst.Name) and value.value in unset):
            raise _Refused(
                f"{method.name.value} puts {key} into the tower's **{star_kwargs}"
            )


def _output_needs(
    method: cst.FunctionDef, name: str, output: str
) -> list[tuple[str, str]]:
    """The fields of the output kept under ``name`` that ``method`` reads, and ``output``
    (the field the port reads) where the method returns it without writing that
    field, each with how; refused where it uses the output otherwise (hands it
    on, reassigns it)."""
    uses = _OutputUses(name)
    method.body.visit(uses)
    counted = len(uses.read) + len(uses.written) + uses.returned + 1  # + the assignment
    if uses.names != counted:
        raise _Refused(f"{method.name.value} hands its output on")
    caller = method.name.value
    needs = [(field, f"{caller} reads its output's {field}") for field in uses.read]
    if uses.returned and output not in uses.written:
        why = f"whose {output} the port reads" if output else "to HF's other methods"
        needs.append((output, f"{caller} returns its output, {why}"))
    return needs


def tower_calls(
    methods: Sequence[tuple[cst.FunctionDef, Sequence[str] | None, str]],
    attr: str,
    encoder: VllmEncoder,
    hf_takes: frozenset[str] | None = None,
) -> TowerCalls | str:
    """Whether vLLM's module (``encoder``) can answer every use of ``self.<attr>`` in
    ``methods``, each ``(method, the item's fields it is called with or None, the
    field of its output the port reads)``: the :class:`TowerCalls`, or why not.
    ``hf_takes``: the parameters of HF's tower's forward, where known; an item
    field HF hands it through ``**kwargs`` that it does not name, it ignores
    (Qwen2.5-VL's ``second_per_grid_ts``), and so does the port.

    The fields needed decide how: by vLLM's plain call where it gives them all
    (``encoder.answers``), else by every layer's output (``encoder.layered``).
    """
    if not encoder.answers and not encoder.layered:
        return f"vLLM's {encoder.name} does not answer HF's calls: {encoder.unlike}"
    keywords: list[str] = []
    needed: list[tuple[str, str]] = []
    called = False
    try:
        for method, fields, output in methods:
            found, calls, needs = _method_calls(
                method, attr, encoder, fields, output, hf_takes
            )
            keywords += found
            needed += needs
            called = called or bool(calls)
    except _Refused as refused:
        return f"HF's feature path uses it as vLLM's {encoder.name} cannot answer: {refused}"
    if not called:
        return "HF's feature path does not call it"
    read = {field for field, _ in needed}
    if read <= {encoder.answers}:
        return TowerCalls(tuple(dict.fromkeys(keywords)), (encoder.answers,), False)
    if read <= set(encoder.layered):
        # Every layer's output is asked for with no keyword but the sizes the class
        # itself cuts HF's batch by.
        other = sorted(set(keywords) - {encoder.unpads_by})
        if other:
            return (
                f"HF's feature path uses it as vLLM's {encoder.name} cannot answer: its "
                f"output's {', '.join(sorted(read))} with {', '.join(other)}, which vLLM's "
                "layer selection does not take"
            )
        return TowerCalls(
            tuple(dict.fromkeys(keywords)),
            tuple(dict.fromkeys(f for f, _ in needed)),
            True,
        )
    # Say a need neither way meets, else that no one way meets them all.
    plain = {encoder.answers}
    unmet = [how for f, how in needed if f not in plain | set(encoder.layered)]
    if not unmet:
        layer = next(how for f, how in needed if f not in plain)
        unmet = [f"{layer}, beside its {encoder.answers}, and no one call gives both"]
    return (
        f"HF's feature path uses it as vLLM's {encoder.name} cannot answer: {unmet[0]}"
    )


# The examples read the table's own entries.
_SIGLIP = VLLM_ENCODERS["siglip_vision_model"]
# Pixtral's: a list of unpadded images, cut from HF's batch by ``image_sizes``.
_PIXTRAL = VLLM_ENCODERS["pixtral"]


def _uses(
    body: str,
    fields: Sequence[str] | None = ("pixel_values",),
    output: str = "pooler_output",
    takes: frozenset[str] | None = None,
    encoder: VllmEncoder = _SIGLIP,
):
    method = cst.parse_module(body).body[0]
    assert isinstance(method, cst.FunctionDef)
    found = tower_calls([(method, fields, output)], "vision_tower", encoder, takes)
    if isinstance(found, TowerCalls):
        return found.keywords, found.fields, found.layered
    return found.rpartition(": ")[2]


# A read of the tower under a branch on image_sizes (LLaVA's split by patch size).
_BRANCHED = (
    "def get_image_features(self, pixel_values, image_sizes=None):\n"
    "    out = self.vision_tower(pixel_values).hidden_states[-2]\n"
    "    if image_sizes is not None:\n"
    "        return out.split(image_sizes // self.vision_tower.patch_size)\n"
    "    return out\n"
)

EXAMPLES = [
    valid(
        "mistral3_reads_a_hidden_layer_of_images_cut_to_their_sizes",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, image_sizes, layer=None, **kwargs):\n"
            "    out = self.vision_tower(pixel_values, image_sizes=image_sizes, **kwargs)\n"
            "    selected = out.hidden_states[layer]\n"
            "    ratio = self.vision_tower.patch_size * self.config.spatial_merge_size\n"
            "    out.pooler_output = self.projector(selected.squeeze(0), image_sizes, ratio)\n"
            "    return out\n",
            fields=("pixel_values", "image_sizes"),
            encoder=_PIXTRAL,
        ),
        (("image_sizes",), ("hidden_states",), True),
    ),
    valid(
        "a_hidden_layer_asked_with_a_keyword_layer_selection_does_not_take",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values):\n"
            "    out = self.vision_tower(pixel_values, interpolate_pos_encoding=True)\n"
            "    return out.hidden_states[-2]\n",
            output="",
        ),
        "its output's hidden_states with interpolate_pos_encoding, which vLLM's layer "
        "selection does not take",
    ),
    valid(
        "paligemma_reads_only_the_last_hidden_state",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, **kwargs):\n"
            "    image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)\n"
            "    selected = image_outputs.last_hidden_state\n"
            "    image_outputs.pooler_output = self.multi_modal_projector(selected)\n"
            "    return image_outputs\n"
        ),
        ((), ("last_hidden_state",), False),
    ),
    valid(
        "a_field_read_straight_off_the_call_with_a_keyword_vllm_takes",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values):\n"
            "    x = self.vision_tower(pixel_values=pixel_values.to(self.vision_tower.dtype),\n"
            "                          interpolate_pos_encoding=True).last_hidden_state\n"
            "    return self.projector(x)\n"
        ),
        (("interpolate_pos_encoding",), ("last_hidden_state",), False),
    ),
    valid(
        "llava_reads_a_hidden_layer_every_layers_output_gives",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, vision_feature_layer=None, **kwargs):\n"
            "    image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)\n"
            "    selected = image_outputs.hidden_states[vision_feature_layer]\n"
            "    image_outputs.pooler_output = self.multi_modal_projector(selected)\n"
            "    return image_outputs\n"
        ),
        ((), ("hidden_states",), True),
    ),
    valid(
        "both_a_hidden_layer_and_the_normed_last_no_one_call_gives",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, **kwargs):\n"
            "    out = self.vision_tower(pixel_values, **kwargs)\n"
            "    return torch.cat([out.hidden_states[-2], out.last_hidden_state], -1)\n"
        ),
        "get_image_features reads its output's hidden_states, beside its "
        "last_hidden_state, and no one call gives both",
    ),
    valid(
        "llava_puts_a_parameter_its_items_never_have_into_kwargs",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, image_sizes=None, **kwargs):\n"
            "    if image_sizes is not None:\n"
            '        kwargs["image_sizes"] = image_sizes\n'
            "    return self.vision_tower(pixel_values, **kwargs).hidden_states[-2]\n",
        ),
        ((), ("hidden_states",), True),
    ),
    valid(
        "a_read_under_a_branch_on_a_parameter_the_port_leaves_none",
        "",
        lambda _: _uses(
            _BRANCHED,
        ),
        ((), ("hidden_states",), True),
    ),
    valid(
        "the_same_read_when_the_parameter_is_an_item_field",
        "",
        lambda _: _uses(
            _BRANCHED,
            ("pixel_values", "image_sizes"),
        ),
        "get_image_features reads self.vision_tower otherwise than calling it",
    ),
    valid(
        "a_field_of_the_item_put_into_kwargs",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, image_sizes=None, **kwargs):\n"
            '    kwargs["image_sizes"] = image_sizes\n'
            "    return self.vision_tower(pixel_values, **kwargs).last_hidden_state\n",
            ("pixel_values", "image_sizes"),
        ),
        "get_image_features puts image_sizes into the tower's **kwargs",
    ),
    valid(
        "an_item_field_would_reach_the_tower_through_kwargs",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, **kwargs):\n"
            "    return self.vision_tower(pixel_values, **kwargs).last_hidden_state\n",
            ("pixel_values", "pixel_attention_mask"),
        ),
        "get_image_features hands the item's pixel_attention_mask on through **kwargs",
    ),
    valid(
        "an_item_field_hfs_tower_does_not_take_it_ignores_as_the_port_does",
        "",
        lambda _: _uses(
            "def get_video_features(self, pixel_values, **kwargs):\n"
            "    return self.vision_tower(pixel_values, **kwargs).last_hidden_state\n",
            ("pixel_values", "second_per_grid_ts"),
            takes=frozenset({"self", "pixel_values", "kwargs"}),
        ),
        ((), ("last_hidden_state",), False),
    ),
    valid(
        "an_item_field_hfs_tower_takes_by_name",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values, **kwargs):\n"
            "    return self.vision_tower(pixel_values, **kwargs).last_hidden_state\n",
            ("pixel_values", "patch_attention_mask"),
            takes=frozenset({"self", "pixel_values", "patch_attention_mask", "kwargs"}),
        ),
        "get_image_features hands the item's patch_attention_mask on through **kwargs",
    ),
    valid(
        "idefics3_passes_a_mask_vllms_siglip_does_not_take",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values):\n"
            "    out = self.vision_tower(pixel_values=pixel_values, patch_attention_mask=m)\n"
            "    return out.last_hidden_state\n"
        ),
        "HF calls it with patch_attention_mask, which vLLM's module does not take",
    ),
    valid(
        "the_output_handed_on_whole",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values):\n"
            "    out = self.vision_tower(pixel_values)\n"
            "    return self.projector(out)\n"
        ),
        "get_image_features hands its output on",
    ),
    valid(
        "returned_unchanged_while_the_port_reads_pooler_output",
        "",
        lambda _: _uses(
            "def get_image_features(self, pixel_values):\n"
            "    out = self.vision_tower(pixel_values)\n"
            "    return out\n"
        ),
        "get_image_features returns its output, whose pooler_output the port reads",
    ),
]
