"""A replacement hook read as a function of the item's own HF outputs.

In transformers 5.x, ``replace_<modality>_token(self, inputs, idx, **kwargs)``
builds one item's replacement from what the sub-processor returned for the
batch. vLLM keeps each item's share of those outputs (its field slices) and
hands them to the port again as ``out_mm_kwargs``, which is exactly what
vLLM's own ports count from (Qwen2-VL reads ``video_grid_thw`` there). So the
hook can run in the port unchanged on a *batch of one*: the item's outputs
laid out as HF lays out a batch holding only that item, read at index 0::

    def replace_video_token(self, video_inputs: dict, video_idx: int, **kwargs) -> str:
        merge_length = self.video_processor.merge_size**2
        num_video_tokens = video_inputs["video_grid_thw"][video_idx].prod() // merge_length
        return self.video_token * num_video_tokens

Three kinds of read are allowed:

- an output HF keeps for the item (``video_grid_thw``): the port has it;
- ``video_metadata``: vLLM hands the port each video's metadata beside its
  frames, and HF gets the very same;
- a key HF computes in its own ``_process_<modality>`` from kept outputs and
  then drops (Qwen2-Audio's ``num_audio_tokens`` from the feature attention
  mask): those lines are transplanted as ``complete_<modality>_inputs``,
  which the port runs on the batch of one before the hook.

Anything else (a key computed from the raw waveform, a whole-dict hand-off)
refuses, and the port delegates to HF visibly.
"""

from __future__ import annotations

import inspect
from typing import Any

import libcst as cst
import libcst.matchers as m

from mmport.analyzers.examples import invalid, snippet_line, valid
from mmport.analyzers.owncall import process_method
from mmport.analyzers.sourcefile import ParsedClass, bound_names, find_method, names_in
from mmport.analyzers.transplant import Transplanter
from mmport.errors import AnalysisError
from mmport.hf.syntax import find_all, statements, string_value
from mmport.spec import HelperFunction, OutputRule

__all__ = ["METADATA_KEY", "analyze_output_hook"]

# The per-video metadata HF's video processor hands the hook (not a model input).
METADATA_KEY = "video_metadata"


def _read_keys(
    func: cst.FunctionDef,
    inputs: str,
    processor_cls: type[Any] | None = None,
    seen: frozenset[str] = frozenset(),
) -> list[str]:
    """Literal keys ``func`` reads from ``inputs`` (``inputs["k"]``, ``inputs.get("k")``).

    ``inputs`` handed whole to another method of the processor
    (``self.replace_video_with_audio_token(video_inputs, ...)``) counts with
    the keys that method reads from it; any other whole use refuses.
    """
    keys: list[str] = []
    subscripts = find_all(func.body, m.Subscript(value=m.Name(inputs)), cst.Subscript)
    for node in subscripts:
        index = node.slice[0].slice if len(node.slice) == 1 else None
        key = string_value(index.value) if isinstance(index, cst.Index) else None
        if key is None:
            raise AnalysisError(f"the hook reads `{inputs}` by a computed key")
        keys.append(key)
    gets = find_all(
        func.body,
        m.Call(func=m.Attribute(value=m.Name(inputs), attr=m.Name("get"))),
        cst.Call,
    )
    for call in gets:
        key = string_value(call.args[0].value) if call.args else None
        if key is None:
            raise AnalysisError(f"the hook reads `{inputs}` by a computed key")
        keys.append(key)
    # ``"video_metadata" in video_inputs``: a key test, which the batch of one answers too.
    tests = m.findall(
        func.body,
        m.ComparisonTarget(operator=m.In() | m.NotIn(), comparator=m.Name(inputs)),
    )
    handed = _handed_on(func, inputs, processor_cls, seen)
    for method_keys in handed.values():
        keys += method_keys
    uses = len(m.findall(func.body, m.Name(inputs)))
    if uses != len(subscripts) + len(gets) + len(tests) + _handoffs(
        func, inputs, handed
    ):
        raise AnalysisError(
            f"the hook hands `{inputs}` on whole, so mmport cannot tell which outputs it reads"
        )
    return list(dict.fromkeys(keys))


def _handoff_calls(func: cst.FunctionDef, inputs: str) -> list[tuple[str, int]]:
    """``(method, position)`` of each ``self.method(..., inputs, ...)`` call in ``func``."""
    calls = []
    for call in find_all(
        func.body, m.Call(func=m.Attribute(value=m.Name("self"))), cst.Call
    ):
        method = cst.ensure_type(
            call.func, cst.Attribute
        ).attr.value  # the matcher's ``self.method``
        for position, arg in enumerate(call.args):
            if arg.keyword is None and m.matches(arg.value, m.Name(inputs)):
                calls.append((method, position))
    return calls


def _handoffs(func: cst.FunctionDef, inputs: str, handed: dict[str, list[str]]) -> int:
    """How many uses of ``inputs`` are whole hand-offs to methods whose reads are known."""
    return sum(1 for method, _ in _handoff_calls(func, inputs) if method in handed)


def _handed_on(
    func: cst.FunctionDef,
    inputs: str,
    processor_cls: type[Any] | None,
    seen: frozenset[str],
) -> dict[str, list[str]]:
    """Per method ``inputs`` is handed to whole: the keys that method reads from it."""
    if processor_cls is None:
        return {}
    found = {}
    for method, position in _handoff_calls(func, inputs):
        target = find_method(processor_cls, method)
        if target is None or method in seen:
            continue
        params = [p.name.value for p in target[1].params.params[1:]]
        if position < len(params):
            found[method] = _read_keys(
                target[1], params[position], processor_cls, seen | {method}
            )
    return found


def _assigned_key(stmt: cst.CSTNode, variable: str) -> str | None:
    """``"k"`` for ``variable["k"] = ...``."""
    node = (
        stmt.body[0]
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        else None
    )
    if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
        return None
    target = node.targets[0].target
    if (
        isinstance(target, cst.Subscript)
        and m.matches(target.value, m.Name(variable))
        and isinstance(target.slice[0].slice, cst.Index)
    ):
        return string_value(target.slice[0].slice.value)
    return None


def _sub_processor_call(stmt: cst.CSTNode) -> str | None:
    """The variable bound to the sub-processor's output: ``audio_inputs = self.feature_extractor(...)``."""
    node = (
        stmt.body[0]
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        else None
    )
    if not (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Name)
    ):
        return None
    call = node.value
    if m.matches(call, m.Call(func=m.Attribute(value=m.Name("self")))):
        return node.targets[0].target.value
    return None


def _self_attribute(stmt: cst.CSTNode) -> str | None:
    """``"x"`` for ``self.x = ...``."""
    node = (
        stmt.body[0]
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        else None
    )
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        if isinstance(target, cst.Attribute) and m.matches(
            target, m.Attribute(value=m.Name("self"))
        ):
            return target.attr.value
    return None


_MUTATORS = frozenset({"append", "extend", "insert", "update", "add", "setdefault"})


def _mutated(stmt: cst.CSTNode) -> set[str]:
    """Names a statement fills in place (``x.append(...)``)."""
    matcher = m.Attribute(value=m.Name(), attr=m.OneOf(*(m.Name(n) for n in _MUTATORS)))
    calls = find_all(stmt, m.Call(func=matcher), cst.Call)
    return {
        node.func.value.value
        for node in calls
        if isinstance(node.func, cst.Attribute)
        and isinstance(node.func.value, cst.Name)
    }


def _defines(stmt: cst.CSTNode) -> set[str]:
    """Names a statement binds or fills in place (``x = ...``, ``x: list = []``, ``x.append(...)``, ``x[k] = ...``)."""
    names = set(bound_names(stmt))
    for node in find_all(stmt, m.AnnAssign(target=m.Name()), cst.AnnAssign):
        if isinstance(node.target, cst.Name):
            names.add(node.target.value)
    return names | _mutated(stmt)


def _sliced(
    body: list[cst.BaseStatement],
    start: int,
    variable: str,
    name: str,
    missing: list[str],
    kept: set[str],
    attrs: set[str],
) -> tuple[list[cst.BaseStatement], set[str]]:
    """The lines of ``body`` (but the sub-processor call at ``start``) that compute ``missing`` keys of
    ``variable`` and ``attrs`` of ``self``, in reverse order, and the names they read.

    Walked backwards from the end: a line is kept when it sets a key or
    attribute still needed, or binds a name a kept line reads; what it reads
    is needed in turn. Refused where a kept line runs the sub-processor again,
    or where something needed is never computed from the item's kept outputs.
    """
    needed_keys, needed_attrs = set(missing), set(attrs)
    needed_names: set[str] = set()
    chosen: list[cst.BaseStatement] = []
    rerun = m.Call(
        func=m.Attribute(
            value=m.Attribute(value=m.Name("self"), attr=m.Name(_sub_attr(body[start])))
        )
    )
    for stmt in reversed(body[:start] + body[start + 1 :]):
        key, attr = _assigned_key(stmt, variable), _self_attribute(stmt)
        defines = _defines(stmt) if key is None and attr is None else set()
        if not (
            (key is not None and key in needed_keys)
            or (attr is not None and attr in needed_attrs)
            or (defines & needed_names)
        ):
            continue
        if m.findall(stmt, rerun):
            raise AnalysisError(
                f"{name} computes {missing or sorted(attrs)} with a second run of its sub-processor"
            )
        chosen.append(stmt)
        needed_keys.discard(key)
        needed_attrs.discard(attr)
        # What the line reads; a name it only fills in place (``x.append``) is still read, as it must exist.
        needed_names |= (
            names_in(stmt) - (bound_names(stmt) - _mutated(stmt)) - {variable, "self"}
        )
        needed_keys |= (
            set(_subscript_keys(stmt, variable)) - kept - ({key} if key else set())
        )
    if needed_keys or needed_attrs:
        raise AnalysisError(
            f"{name} computes {sorted(needed_keys | needed_attrs)} from more than the item's kept outputs"
        )
    return chosen, needed_names


def _completion(
    processor_cls: type[Any],
    modality: str,
    missing: list[str],
    kept: set[str],
    attrs: set[str],
) -> tuple[
    ParsedClass, cst.FunctionDef, list[cst.BaseStatement], str, str | None, str | None
]:
    """The lines of HF's ``_process_<modality>`` that compute ``missing`` keys (and ``self`` attributes).

    They may read the item's kept outputs, the raw items (AudioFlamingo 3 cuts
    each waveform into 30 s windows before its feature extractor runs) and
    the method's ``**kwargs`` (the modality's merged kwargs): the port has
    all three for one item. The sub-processor call itself is never carried.

    Returns the parsed class, the method, the sliced statements in order, the
    name HF binds the sub-processor's output to, and the names of the raw-items
    parameter and of ``**kwargs`` where the lines read them.
    """
    name = process_method(modality)
    found = find_method(processor_cls, name, models_only=True)
    if found is None:
        raise AnalysisError(
            f"the hook reads {missing or sorted(attrs)}, which HF drops and computes nowhere mmport can read"
        )
    parsed, func = found
    body = statements(func.body)
    start, variable = next(
        ((i, v) for i, s in enumerate(body) if (v := _sub_processor_call(s))),
        (None, None),
    )
    if start is None or variable is None:
        raise AnalysisError(
            f"{name} does not bind its sub-processor's output to a name"
        )
    chosen, needed_names = _sliced(body, start, variable, name, missing, kept, attrs)
    params = [p.name.value for p in func.params.params[1:]]
    raw = params[0] if params and params[0] in needed_names else None
    star = func.params.star_kwarg.name.value if func.params.star_kwarg else None
    other = needed_names & set(params[1:])
    if other:
        raise AnalysisError(
            f"{name} computes {missing or sorted(attrs)} from its arguments {sorted(other)}"
        )
    return (
        parsed,
        func,
        list(reversed(chosen)),
        variable,
        raw,
        star if star in needed_names else None,
    )


def _sub_attr(stmt: cst.CSTNode) -> str:
    """``feature_extractor`` for ``audio_inputs = self.feature_extractor(...)``."""
    node = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
    call = node.value if isinstance(node, cst.Assign) else None
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute), (
        "a statement _sub_processor_call names"
    )
    return call.func.attr.value


def _computed_in_process(processor_cls: type[Any], modality: str, key: str) -> bool:
    """Does the model's own ``_process_<modality>`` assign ``key`` (then it is a completion's to compute)?"""
    name = process_method(modality)
    found = find_method(processor_cls, name, models_only=True)
    if found is None:
        return False
    targets = find_all(
        found[1],
        m.AssignTarget(
            target=m.Subscript(slice=[m.SubscriptElement(m.Index(m.SimpleString()))])
        ),
        cst.AssignTarget,
    )
    return any(_literal_key(t.target) == key for t in targets)


def _literal_key(node: cst.BaseExpression) -> str | None:
    """``"k"`` for ``x["k"]`` (its first subscript), else None."""
    if isinstance(node, cst.Subscript) and isinstance(node.slice[0].slice, cst.Index):
        return string_value(node.slice[0].slice.value)
    return None


def _hook_attributes(func: cst.FunctionDef, processor_cls: type[Any]) -> set[str]:
    """``self`` attributes the hook reads that the processor sets only while processing (not in ``__init__``)."""
    read = {
        node.attr.value
        for node in find_all(
            func.body, m.Attribute(value=m.Name("self")), cst.Attribute
        )
    }
    init = find_method(processor_cls, "__init__")
    set_in_init = set()
    if init is not None:
        set_in_init = _self_targets(init[1])
    process = [
        find_method(processor_cls, n, models_only=True)
        for n in ("_process_audio", "_process_videos", "_process_images")
    ]
    set_while_processing = {
        attr
        for found in process
        if found is not None
        for attr in _self_targets(found[1])
    }
    return (read & set_while_processing) - set_in_init


def _self_targets(func: cst.FunctionDef) -> set[str]:
    """``x`` for each ``self.x = ...`` in ``func``."""
    targets = find_all(
        func, m.AssignTarget(target=m.Attribute(value=m.Name("self"))), cst.AssignTarget
    )
    return {t.target.attr.value for t in targets if isinstance(t.target, cst.Attribute)}


def _subscript_keys(stmt: cst.CSTNode, variable: str) -> list[str]:
    keys = []
    for node in find_all(stmt, m.Subscript(value=m.Name(variable)), cst.Subscript):
        if (key := _literal_key(node)) is not None:
            keys.append(key)
    for call in find_all(
        stmt,
        m.Call(func=m.Attribute(value=m.Name(variable), attr=m.Name("pop"))),
        cst.Call,
    ):
        if call.args and (key := string_value(call.args[0].value)) is not None:
            keys.append(key)
    return keys


def _port_function(func: cst.FunctionDef, name: str) -> cst.FunctionDef:
    """``func`` renamed, undecorated, without its docstring and annotations beyond builtins."""
    body = list(func.body.body)
    first = body[0] if body else None
    if (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and len(body) > 1
    ):
        body = body[1:]  # the port cites the HF line instead of the docstring
    params = func.params.with_changes(
        params=[p.with_changes(annotation=None) for p in func.params.params],
        kwonly_params=[
            p.with_changes(annotation=None) for p in func.params.kwonly_params
        ],
        star_kwarg=func.params.star_kwarg.with_changes(annotation=None)
        if func.params.star_kwarg
        else func.params.star_kwarg,
    )
    return func.with_changes(
        name=cst.Name(name),
        decorators=(),
        params=params,
        returns=None,
        body=func.body.with_changes(body=body),
    )


def analyze_output_hook(
    processor_cls: type[Any],
    modality: str,
    kept: set[str],
    sub_kept: set[str] | frozenset[str] = frozenset(),
) -> OutputRule:
    """``replace_<modality>_token`` of ``processor_cls`` as a port function of the item's outputs.

    ``kept`` are the output keys HF returns for an item alone (observed);
    ``sub_kept`` those its sub-processor itself returns. A key the hook reads
    that HF drops but the sub-processor returns (Gemma 4's
    ``num_soft_tokens_per_video``) is one the port keeps beside HF's outputs.
    """
    hook = f"replace_{modality}_token"
    found = find_method(processor_cls, hook, models_only=True)
    if found is None:
        raise AnalysisError(
            f"{processor_cls.__name__} defines no {hook}; its expansion cannot be derived statically"
        )
    parsed, func = found
    if len(func.params.params) < 3:
        raise AnalysisError(
            f"{hook} of {processor_cls.__name__} does not take (inputs, index)"
        )
    inputs = func.params.params[1].name.value
    keys = _read_keys(func, inputs, processor_cls)
    metadata = METADATA_KEY in keys and modality == "video"
    missing = [
        k for k in keys if k not in kept and not (metadata and k == METADATA_KEY)
    ]
    transplant = Transplanter(import_shared=True)
    owner = next(k for k in processor_cls.__mro__ if hook in vars(k))
    code = transplant.code(_port_function(func, hook), processor_cls, "processor")
    transplant.resolve(code, vars(inspect.getmodule(owner)), hook)
    completion, completion_raw, completion_kwargs = None, False, False
    attrs = _hook_attributes(func, processor_cls)
    extra = tuple(
        k
        for k in missing
        if k in sub_kept and not _computed_in_process(processor_cls, modality, k)
    )
    missing = [k for k in missing if k not in extra]
    if missing or attrs:
        completion, completion_raw, completion_kwargs = _completion_function(
            processor_cls, modality, missing, kept, attrs, transplant
        )
    reads = tuple(k for k in keys if k in kept or k in extra)
    source = parsed.source(func)
    return OutputRule(
        takes_kwargs=func.params.star_kwarg is not None,
        hook=HelperFunction(hook, code, source, f"{owner.__name__}.{hook}", True),
        reads=reads,
        reads_metadata=metadata,
        completion=completion,
        completion_raw=completion_raw,
        completion_kwargs=completion_kwargs,
        extra_keys=extra,
        helpers=tuple(h for h in transplant.helpers.values()),
        imports=tuple(sorted(transplant.imports)),
        source=source,
    )


def _completion_function(
    processor_cls: type[Any],
    modality: str,
    missing: list[str],
    kept: set[str],
    attrs: set[str],
    transplant: Transplanter,
) -> tuple[HelperFunction, bool, bool]:
    """``def complete_<modality>_inputs(processor, <inputs>[, <raw items>][, **kwargs])``: HF's lines that add what the hook reads.

    Also says whether it takes the raw items and the merged kwargs.
    """
    parsed, func, statements, variable, raw, star = _completion(
        processor_cls, modality, missing, kept, attrs
    )
    name = f"complete_{modality}_inputs"
    params = cst.Parameters(
        [
            cst.Param(cst.Name("self")),
            cst.Param(cst.Name(variable)),
            *([cst.Param(cst.Name(raw))] if raw else []),
        ]
    )
    if star:
        params = params.with_changes(star_kwarg=cst.Param(cst.Name(star)))
    funcdef = cst.FunctionDef(cst.Name(name), params, cst.IndentedBlock(statements))
    code = transplant.code(funcdef, processor_cls, "processor")
    owner = next(k for k in processor_cls.__mro__ if func.name.value in vars(k))
    transplant.resolve(code, vars(inspect.getmodule(owner)), name)
    return (
        HelperFunction(
            name, code, parsed.source(func), f"{owner.__name__}.{func.name.value}", True
        ),
        bool(raw),
        bool(star),
    )


# Qwen2-VL's video hook counts from the item's own grid, an output HF keeps for it.
_QWEN2_VL = """
class Qwen2VLProcessor:
    def replace_video_token(self, video_inputs: dict, video_idx: int, **kwargs) -> str:
        merge_length = self.video_processor.merge_size**2
        num_video_tokens = video_inputs["video_grid_thw"][video_idx].prod() // merge_length
        return self.video_token * num_video_tokens
"""

_QWEN2_VL_HOOK = snippet_line(_QWEN2_VL, "def replace_video_token")

EXAMPLES = [
    valid(
        "qwen2_vl_video_hook_runs_on_the_items_kept_grid",
        _QWEN2_VL,
        lambda snippet: analyze_output_hook(
            snippet.Qwen2VLProcessor, "video", {"pixel_values_videos", "video_grid_thw"}
        ),
        OutputRule(
            hook=HelperFunction(
                "replace_video_token",
                "def replace_video_token(processor, video_inputs, video_idx, **kwargs):\n"
                "    merge_length = processor.video_processor.merge_size**2\n"
                '    num_video_tokens = video_inputs["video_grid_thw"][video_idx].prod() // merge_length\n'
                "    return processor.video_token * num_video_tokens",
                _QWEN2_VL_HOOK,
                "Qwen2VLProcessor.replace_video_token",
                True,
            ),
            reads=("video_grid_thw",),
            source=_QWEN2_VL_HOOK,
        ),
    ),
    invalid(
        "a_key_neither_kept_nor_computed_from_kept_outputs",
        """
        class Qwen2AudioProcessor:
            def replace_audio_token(self, audio_inputs: dict, audio_idx: int, **kwargs) -> str:
                return self.audio_token * audio_inputs["num_audio_tokens"][audio_idx]
        """,
        lambda snippet: analyze_output_hook(
            snippet.Qwen2AudioProcessor, "audio", {"input_features"}
        ),
        refusal=AnalysisError,
        match="HF drops and computes nowhere mmport can read",
    ),
    invalid(
        "a_processor_without_the_modalitys_hook",
        _QWEN2_VL,
        lambda snippet: analyze_output_hook(snippet.Qwen2VLProcessor, "audio", set()),
        refusal=AnalysisError,
        match="defines no replace_audio_token",
    ),
]
