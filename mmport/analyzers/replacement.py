"""Transplant the whole replacement hook when it returns more than ``token * count``.

Many hooks wrap the image tokens in begin/end-of-image tokens, break rows or
tag tiles, e.g. Gemma 3n::

    def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
        return self.full_image_sequence

or Idefics3, which reads the item's tile grid::

    image_rows = [row for row_list in image_inputs["rows"] for row in row_list][image_idx]
    ...

The port gets the hook as ``def replace_image_token(processor, configured,
image_height, image_width, **kwargs) -> str``: reads of per-item outputs that
follow from the item's original size are rewritten to read ``configured``, the
processor under the request's settings (:mod:`mmport.analyzers.substitute`),
helpers are transplanted with it, and ``**kwargs`` stay what HF passes there,
the processor's merged image kwargs. A hook still reading the processed item
after the rewrite refuses the transplant.
"""

from __future__ import annotations

import inspect
import json

import libcst as cst
import libcst.matchers as m

from mmport.analyzers.itemreads import ItemRead
from mmport.analyzers.sourcefile import find_method
from mmport.analyzers.substitute import CONFIGURED, ItemReadRewriter, carry_read_helpers, item_reads
from mmport.analyzers.transplant import Transplanter, free_names
from mmport.errors import AnalysisError
from mmport.spec import CountRule, HelperFunction

__all__ = ["HOOK", "analyze_replacement_text", "merged_image_kwargs"]

HOOK = "replace_image_token"


def _port_params(func: cst.FunctionDef, body: cst.BaseSuite) -> cst.Parameters:
    """``(self, image_inputs, image_idx, **kwargs)`` → ``(processor, configured, image_height: int, image_width: int, **kwargs)``.

    ``configured`` (the processor under the request's settings) comes only
    when the rewritten reads of the item use it, ``**kwargs`` only when the
    body reads them.
    """
    size = [cst.Param(cst.Name(n), cst.Annotation(cst.Name("int"))) for n in ("image_height", "image_width")]
    configured = [cst.Param(cst.Name(CONFIGURED))] if m.findall(body, m.Name(CONFIGURED)) else []
    star = func.params.star_kwarg
    if star is not None and not m.findall(body, m.Name(star.name.value)):
        star = None
    return cst.Parameters([cst.Param(cst.Name("self")), *configured, *size], star_kwarg=star)


def _guard(read: ItemRead, kwargs: str) -> cst.BaseStatement:
    """Refuse, at run time, the settings under which a constant read is not constant."""
    setting = json.dumps(read.setting)
    message = json.dumps(f"this port was derived with {read.setting} off; regenerate it")
    return cst.parse_statement(
        f"if {kwargs}.get({setting}, getattr(processor.image_processor, {setting}, None)):\n"
        f"    # HF {read.source}: {json.dumps(read.key)} is {read.value} only while {read.setting} is off.\n"
        f"    raise NotImplementedError({message})\n"
    )


def merged_image_kwargs(processor) -> dict:
    """The merged image kwargs HF passes to the hook (as the port computes them)."""
    kwargs = processor._merge_kwargs(processor.valid_processor_kwargs, tokenizer_init_kwargs=processor.tokenizer.init_kwargs)
    return kwargs["images_kwargs"]


def _check_constants(reads: dict[str, ItemRead], processor) -> None:
    """A constant read holds only while its setting is off in this snapshot (the port checks it again)."""
    if processor is None:
        return
    settings = merged_image_kwargs(processor)
    for read in reads.values():
        if read.kind == "constant" and settings.get(read.setting, getattr(processor.image_processor, read.setting, None)):
            raise AnalysisError(f"{read.key!r} follows the image's content while {read.setting} is on ({read.source})")


def _rewritten_hook(func: cst.FunctionDef, reads: ItemReadRewriter) -> cst.FunctionDef:
    """The hook with item reads rewritten, its signature the port's, guards first."""
    body = func.body.visit(reads)
    statements = list(body.body)
    first = statements[0] if statements else None
    if isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr) and len(statements) > 1:
        statements = statements[1:]  # the port cites the HF line instead of the docstring
    kwargs = func.params.star_kwarg.name.value if func.params.star_kwarg else None
    constants = [r for r in reads.used.values() if r.kind == "constant"]
    if constants and kwargs is None:
        raise AnalysisError(f"{HOOK} cannot see the settings under which {constants[0].key!r} is constant")
    guards = [_guard(r, kwargs) for r in constants]
    body = body.with_changes(body=[*guards, *statements])
    params, returns = _port_params(func, body), cst.Annotation(cst.Name("str"))
    return func.with_changes(name=cst.Name(HOOK), params=params, returns=returns, decorators=(), body=body)


def analyze_replacement_text(processor_cls: type, image_processor_cls: type, processor=None) -> CountRule:
    """The replacement hook of ``processor_cls`` as a port function of the item's size."""
    # ProcessorMixin's own hook only raises NotImplementedError; the model's must define it.
    found = find_method(processor_cls, HOOK, models_only=True)
    if found is None:
        raise AnalysisError(f"{processor_cls.__name__} defines no {HOOK}; its expansion cannot be derived statically")
    parsed, func = found
    inputs, index = (p.name.value for p in func.params.params[1:3])
    kwargs = func.params.star_kwarg.name.value if func.params.star_kwarg else None
    known, api = item_reads(processor_cls, image_processor_cls)
    reads = ItemReadRewriter(inputs, index, known, kwargs)
    transplant = Transplanter()
    code = transplant.code(_rewritten_hook(func, reads), processor_cls, "processor")
    leaked = free_names(code) & {inputs, index}
    if leaked:
        raise AnalysisError(f"{HOOK} of {processor_cls.__name__} reads the processed item beyond what its size explains")
    _check_constants(reads.used, processor)
    owner = next(k for k in processor_cls.__mro__ if HOOK in vars(k))
    namespace = vars(inspect.getmodule(owner))
    carry_read_helpers(transplant, reads.used, image_processor_cls, api)
    transplant.resolve(code, namespace, HOOK)
    source = parsed.source(func)
    return CountRule(
        statements=(),
        result="",
        uses_geometry=False,
        strategy="derived",
        source=source,
        size_dependent=bool(set(reads.used) - {r.key for r in reads.used.values() if r.kind == "constant"}),
        helpers=tuple(transplant.helpers.values()),
        imports=tuple(sorted(transplant.imports)),
        item_reads=tuple((r.key, r.kind, r.source) for r in reads.used.values()),
        replacement=HelperFunction(HOOK, code, source, f"{owner.__name__}.{HOOK}", True),
    )
