"""Per-request processor settings: which ones change HF's counts, and values to try.

vLLM's users pass ``mm_processor_kwargs`` (at start-up or per request); vLLM
hands them to the port as ``hf_processor_mm_kwargs`` and to HF's processor
call. A port that counts from the processor's defaults gives the wrong
number of tokens under them. verify learns the settings that matter from HF
itself, never from the port or the analyzer: for every typed call kwarg of a
modality's scope with a default it can vary (a flag, a positive integer, a
size of integers), it asks HF to count a reference item under a changed
value, and keeps the settings under which HF's count changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mmport.errors import FOREIGN_ERRORS, AnalysisError, BadReferenceError, MmportError
from mmport.hf.kwargs import SCOPES, typed_kwarg_classes
from mmport.hf.modalities import sub_processor

__all__ = [
    "Setting",
    "count_changing_settings",
    "parse_processor_kwargs",
    "typed_call_kwargs",
]

# How many count-changing settings each modality's probes run under.
SETTINGS_PER_MODALITY = 3


@dataclass(frozen=True)
class Setting:
    """Processor call kwargs a request may carry, as vLLM passes them on (flat)."""

    kwargs: dict[str, Any] = field(hash=False)
    modality: str = ""
    origin: str = "drawn"  # "drawn" from HF's own count changes, or "pinned" by --processor-kwargs

    def describe(self) -> str:
        """``max_pixels=3136, do_resize=False``: how reports name the setting."""
        return ", ".join(
            f"{k}={json.dumps(v, default=str)}" for k, v in self.kwargs.items()
        )

    def key(self) -> str:
        """A stable key for caches."""
        return json.dumps(self.kwargs, sort_keys=True, default=str)


def parse_processor_kwargs(text: str | None) -> dict[str, Any] | None:
    """``--processor-kwargs JSON``: a JSON object of processor kwargs, else a :class:`MmportError`."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MmportError(
            f"--processor-kwargs is not valid JSON ({exc.msg} at column {exc.colno}); give an object such as '{{\"max_pixels\": 200704}}'"
        ) from exc
    if not isinstance(value, dict) or not value:
        raise MmportError(
            "--processor-kwargs must be a non-empty JSON object of processor kwargs, such as '{\"max_pixels\": 200704}'"
        )
    return value


def check_known_kwargs(processor: Any, kwargs: dict[str, Any]) -> None:
    """Every key of ``kwargs`` is a typed call kwarg of the processor, or one of its scopes; else a :class:`MmportError`."""
    known = {
        name for modality in SCOPES for name in typed_call_kwargs(processor, modality)
    }
    known |= set(SCOPES.values()) | {"text_kwargs"}
    with contextlib.suppress(
        Exception
    ):  # a processor without typed text kwargs: the others are all it knows
        known |= set(
            typing.get_type_hints(
                typing.get_type_hints(processor.valid_processor_kwargs)["text_kwargs"]
            )
        )
    unknown = [key for key in kwargs if key not in known]
    if unknown:
        raise MmportError(
            f"--processor-kwargs names {', '.join(map(repr, unknown))}, which {type(processor).__name__} does not take; "
            f"its call kwargs are: {', '.join(sorted(known - {'text_kwargs'}))}"
        )


def typed_call_kwargs(processor: Any, modality: str) -> list[str]:
    """The typed call kwargs of ``modality``'s scope: the processor's kwargs class and the sub-processor's own."""
    return list(
        typed_kwarg_classes(processor, _sub_processor(processor, modality), modality)
    )


def _sub_processor(processor: Any, modality: str) -> Any:
    try:
        return sub_processor(processor, modality)[1]
    except AnalysisError:
        return None


def _defaults(processor: Any, modality: str) -> dict[str, Any]:
    """Each typed kwarg's value in an ordinary call: the processor's call defaults, else the sub-processor's attribute."""
    try:
        merged = processor._merge_kwargs(
            processor.valid_processor_kwargs,
            tokenizer_init_kwargs=processor.tokenizer.init_kwargs,
        )
        scoped = dict(merged.get(SCOPES[modality], {}))
    except (
        FOREIGN_ERRORS
    ):  # HF cannot merge its kwargs: the sub-processor's attributes remain
        scoped = {}
    sub = _sub_processor(processor, modality)
    values = {}
    for name in typed_call_kwargs(processor, modality):
        value = scoped.get(name, getattr(sub, name, None))
        if value is None:
            value = getattr(processor, name, None)
        if value is not None:
            values[name] = value
    return values


# Factors an integer setting (or each side of a size) is tried at: a budget
# halved or doubled, and cut to an eighth, which pixel budgets far above the
# reference items need before they bite.
FACTORS = (0.5, 2, 0.125)


def variations(value: Any) -> list[Any]:
    """Other values of a setting's kind: a flag flipped, an integer or a size's sides scaled by :data:`FACTORS`."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return (
            list(
                dict.fromkeys(
                    v
                    for v in (int(value * f) for f in FACTORS)
                    if v >= 1 and v != value
                )
            )
            if value > 0
            else []
        )
    if dataclasses.is_dataclass(value) and not isinstance(
        value, type
    ):  # transformers' SizeDict
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        sides = {k: v for k, v in value.items() if v is not None}
        if sides and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 1
            for v in sides.values()
        ):
            return [{k: max(1, int(v * f)) for k, v in sides.items()} for f in FACTORS]
    return []


def _architecture_values(config: Any) -> dict[str, Any]:
    """Every ``name: value`` of the model config and its sub-configs (``vision_config.patch_size``...)."""
    values: dict[str, Any] = {}
    pending = [config.to_dict() if hasattr(config, "to_dict") else {}]
    while pending:
        for name, value in pending.pop().items():
            if isinstance(value, dict):
                pending.append(value)
            else:
                values.setdefault(name, value)
    return values


def is_architecture(name: str, default: Any, architecture: dict[str, Any]) -> bool:
    """True when the model config fixes this value: the model's, not a request's.

    Either the config holds a value of the same name (``spatial_merge_size``
    for ``merge_size``; synthetic configs need not agree with the processor's
    value, so a name of several words decides alone), or it is a size whose sides all equal the
    vision tower's ``image_size`` (LLaVA's ``crop_size``: the tower's position
    embeddings are built for it).
    """
    for key, value in architecture.items():
        named = str(key) == name or str(key).endswith(f"_{name}")
        # A one-word name (``size``) ends many config keys (``hidden_size``): only its value tells.
        if named and ("_" in name or value == default):
            return True
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        default = dataclasses.asdict(default)
    sides = (
        [v for v in default.values() if v is not None]
        if isinstance(default, dict)
        else []
    )
    if (
        not sides
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in sides)
        or len(set(sides)) != 1
    ):
        return False  # not a square size of integer sides
    return any(
        str(key).endswith("image_size") and value == sides[0]
        for key, value in architecture.items()
    )


def telling_items(hf: Any, setting: Setting) -> list:
    """Reference items HF counts differently under ``setting`` than by default: the probes' proof that it matters."""
    told = []
    for modality in hf.modalities:
        if setting.modality in ("", modality):
            for item in hf.telling_candidates(modality):
                try:
                    if hf.item_count(item, setting) != hf.item_count(item):
                        told.append(item)
                except FOREIGN_ERRORS:
                    continue  # HF refuses the item under this setting
    return told


def _reshapes_patches(hf: Any, item: Any, setting: Setting) -> bool:
    """True when the setting changes the width of HF's pixel rows (a patch size): the vision tower's input, not a request's."""
    widths = []
    for given in (None, setting):
        outputs = hf.single(item, given).mm
        widths.append(
            sorted(
                (k, v.shape[-1])
                for k, v in outputs.items()
                if v.is_floating_point() and v.ndim >= 2
            )
        )
    return widths[0] != widths[1]


def count_changing_settings(
    hf: Any,
    seed: int = 0,
    per_modality: int = SETTINGS_PER_MODALITY,
    keep: Callable[[Setting], bool] | None = None,
) -> list[Setting]:
    """Up to ``per_modality`` settings per modality under which HF counts a reference item differently (seeded).

    ``hf`` is the verify reference (:class:`mmport.verify.reference.HFReference`).
    Settings HF rejects, or under which it counts as by default, are not kept;
    nor those ``keep`` turns down (settings the HF model cannot take,
    :meth:`mmport.verify.fit.FitJudge.applicable`): another value, or another
    setting, is drawn in their place, so they cost no coverage.
    """
    if per_modality <= 0:
        return []
    rng = random.Random(seed)
    chosen: list[Setting] = []
    try:
        architecture = _architecture_values(hf.snapshot.load_config())
    except BadReferenceError:
        architecture = {}
    for modality in hf.modalities:
        items = hf.reference_items(modality)
        try:
            baseline = [hf.item_count(item) for item in items]
        except FOREIGN_ERRORS:  # HF refuses the reference items: no setting to draw
            continue
        # In a seeded order, until enough are found: each try costs HF calls.
        candidates = list(_defaults(hf.processor, modality).items())
        rng.shuffle(candidates)
        found: list[Setting] = []
        for name, default in candidates:
            if len(found) == per_modality:
                break
            if is_architecture(name, default, architecture):
                continue  # the vision tower is built for it: no request changes it
            for value in variations(default):
                setting = Setting({name: value}, modality)
                try:
                    counts = [hf.item_count(item, setting) for item in items]
                    if (
                        counts == baseline
                        or not all(counts)
                        or _reshapes_patches(hf, items[0], setting)
                    ):
                        continue
                except FOREIGN_ERRORS:
                    continue  # HF rejects the value: no request could carry it
                if keep is not None and not keep(setting):
                    continue
                found.append(setting)
                break
        chosen += found
    return chosen
