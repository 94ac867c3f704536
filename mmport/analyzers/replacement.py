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
the processor's merged image kwargs. A read that is a constant only while a
switch is off (Gemma 3's ``num_crops`` without ``do_pan_and_scan``) keeps the
constant then, and otherwise reads HF's own preprocessing of a blank image of
the item's size under those kwargs, as HF's ``_process_images`` runs it. A
hook still reading the processed item after the rewrite refuses the transplant.
"""

from __future__ import annotations

import inspect
from typing import Any

import libcst as cst
import libcst.matchers as m

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import find_method
from mmport.analyzers.substitute import (
    CONFIGURED,
    PREPROCESS_FUNCTION,
    ItemReadRewriter,
    carry_read_helpers,
    item_reads,
)
from mmport.analyzers.transplant import Transplanter, free_names
from mmport.errors import AnalysisError
from mmport.hf.syntax import rewritten
from mmport.spec import CountRule, HelperFunction, Source

__all__ = ["HOOK", "analyze_replacement_text", "merged_image_kwargs"]

HOOK = "replace_image_token"


def _port_params(func: cst.FunctionDef, body: cst.BaseSuite) -> cst.Parameters:
    """``(self, image_inputs, image_idx, **kwargs)`` → ``(processor, configured, image_height: int, image_width: int, **kwargs)``.

    ``configured`` (the processor under the request's settings) comes only
    when the rewritten reads of the item use it, ``**kwargs`` only when the
    body reads them.
    """
    size = [
        cst.Param(cst.Name(n), cst.Annotation(cst.Name("int")))
        for n in ("image_height", "image_width")
    ]
    configured = (
        [cst.Param(cst.Name(CONFIGURED))] if m.findall(body, m.Name(CONFIGURED)) else []
    )
    star = func.params.star_kwarg
    if star is not None and not m.findall(body, m.Name(star.name.value)):
        star = None
    return cst.Parameters(
        [cst.Param(cst.Name("self")), *configured, *size], star_kwarg=star
    )


def merged_image_kwargs(processor) -> dict:
    """The merged image kwargs HF passes to the hook (as the port computes them)."""
    kwargs = processor._merge_kwargs(
        processor.valid_processor_kwargs,
        tokenizer_init_kwargs=processor.tokenizer.init_kwargs,
    )
    return kwargs["images_kwargs"]


# The port's preprocessing of a blank image of the item's size, called in place of a
# read HF makes only under a switch (mmport.analyzers.substitute).
PREPROCESS_CODE = f"""def {PREPROCESS_FUNCTION}(
    image_processor: BaseImageProcessor, image_height: int, image_width: int, images_kwargs: Mapping[str, object]
) -> BatchFeature:
    \"\"\"HF's image processor on one blank image of this size, called as HF's processor calls it:
    what HF's preprocessing computes from the image's size alone under a request's settings.\"\"\"
    return image_processor([Image.new("RGB", (image_width, image_height))], **images_kwargs)"""
PREPROCESS_IMPORTS = (
    "from collections.abc import Mapping",
    "from PIL import Image",
    "from transformers import BaseImageProcessor, BatchFeature",
)


def _carry_preprocessing(transplant: Transplanter, processor_cls: type[Any]) -> Source:
    """Queue the port's blank-image preprocessing, cited at HF's call of its image processor."""
    found = find_method(processor_cls, "_process_images")
    call = m.Call(
        func=m.Attribute(value=m.Name("self"), attr=m.Name("image_processor"))
    )
    calls = m.findall(found[1], call) if found else []
    if found is None or not calls:
        raise AnalysisError(
            f"{processor_cls.__name__} does not call its image processor in _process_images"
        )
    source = found[0].source(calls[0])
    transplant.helpers[PREPROCESS_FUNCTION] = HelperFunction(
        PREPROCESS_FUNCTION, PREPROCESS_CODE, source, f"`{source.code}`"
    )
    transplant.imports.update(PREPROCESS_IMPORTS)
    return source


def _rewritten_hook(func: cst.FunctionDef, reads: ItemReadRewriter) -> cst.FunctionDef:
    """The hook with item reads rewritten, its signature the port's."""
    body = rewritten(func.body, reads)
    statements = list(body.body)
    first = statements[0] if statements else None
    if (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and len(statements) > 1
    ):
        statements = statements[
            1:
        ]  # the port cites the HF line instead of the docstring
    kwargs = func.params.star_kwarg.name.value if func.params.star_kwarg else None
    switched = [r for r in reads.used.values() if r.kind == "constant"]
    if switched and kwargs is None:
        raise AnalysisError(
            f"{HOOK} cannot see the settings under which {switched[0].key!r} is constant"
        )
    body = body.with_changes(body=statements)
    params, returns = _port_params(func, body), cst.Annotation(cst.Name("str"))
    return func.with_changes(
        name=cst.Name(HOOK), params=params, returns=returns, decorators=(), body=body
    )


def analyze_replacement_text(
    processor_cls: type[Any], image_processor_cls: type[Any]
) -> CountRule:
    """The replacement hook of ``processor_cls`` as a port function of the item's size."""
    # ProcessorMixin's own hook only raises NotImplementedError; the model's must define it.
    found = find_method(processor_cls, HOOK, models_only=True)
    if found is None:
        raise AnalysisError(
            f"{processor_cls.__name__} defines no {HOOK}; its expansion cannot be derived statically"
        )
    parsed, func = found
    inputs, index = (p.name.value for p in func.params.params[1:3])
    kwargs = func.params.star_kwarg.name.value if func.params.star_kwarg else None
    known, api = item_reads(processor_cls, image_processor_cls)
    reads = ItemReadRewriter(inputs, index, known, kwargs)
    transplant = Transplanter(import_shared=True)
    code = transplant.code(_rewritten_hook(func, reads), processor_cls, "processor")
    leaked = free_names(code) & {inputs, index}
    if leaked:
        raise AnalysisError(
            f"{HOOK} of {processor_cls.__name__} reads the processed item beyond what its size explains"
        )
    owner = next(k for k in processor_cls.__mro__ if HOOK in vars(k))
    namespace = vars(inspect.getmodule(owner))
    carry_read_helpers(transplant, reads.used, image_processor_cls, api)
    switched = any(r.kind == "constant" for r in reads.used.values())
    preprocess_source = (
        _carry_preprocessing(transplant, processor_cls) if switched else None
    )
    transplant.resolve(code, namespace, HOOK)
    source = parsed.source(func)
    return CountRule(
        statements=(),
        result="",
        uses_geometry=False,
        strategy="derived",
        source=source,
        size_dependent=bool(
            set(reads.used)
            - {r.key for r in reads.used.values() if r.kind == "constant"}
        ),
        helpers=tuple(transplant.helpers.values()),
        imports=tuple(sorted(transplant.imports)),
        support_names=tuple(sorted(transplant.support)),
        item_reads=tuple((r.key, r.kind, r.source) for r in reads.used.values()),
        replacement=HelperFunction(
            HOOK, code, source, f"{owner.__name__}.{HOOK}", True
        ),
        preprocess_source=preprocess_source,
    )


EXAMPLES = [
    valid(
        "gemma3n_hook_travels_whole",
        """
        class Gemma3nProcessor:
            def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
                return self.full_image_sequence
        """,
        lambda snippet: analyze_replacement_text(snippet.Gemma3nProcessor, object),
        CountRule(
            statements=(),
            result="",
            uses_geometry=False,
            strategy="derived",
            source=Source(
                SNIPPET_FILE,
                2,
                "def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:",
            ),
            replacement=HelperFunction(
                "replace_image_token",
                "def replace_image_token(processor, image_height: int, image_width: int) -> str:\n"
                "    return processor.full_image_sequence",
                Source(
                    SNIPPET_FILE,
                    2,
                    "def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:",
                ),
                "Gemma3nProcessor.replace_image_token",
                True,
            ),
        ),
    ),
    invalid(
        "a_hook_counting_the_processed_pixels_is_refused",
        """
        class Proc:
            def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
                n = image_inputs["pixel_values"][image_idx].shape[0]
                return f"{self.boi_token}{self.image_token * n}{self.eoi_token}"
        """,
        lambda snippet: analyze_replacement_text(snippet.Proc, object),
        refusal=AnalysisError,
        match="beyond what its size explains",
    ),
    invalid(
        "a_processor_without_a_hook_of_its_own",
        """
        class Blip2Processor:
            def __call__(self, images=None, text=None, **kwargs):
                return self.tokenizer(text)
        """,
        lambda snippet: analyze_replacement_text(snippet.Blip2Processor, object),
        refusal=AnalysisError,
        match="defines no replace_image_token",
    ),
]
