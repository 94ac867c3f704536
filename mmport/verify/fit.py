"""Request settings the HF model cannot take: not the port's fault.

vLLM's users can only send what the model takes. A setting under which HF's
processor gives the model inputs it refuses is one no engine serves, whatever
the port counts: LLaVA-1.5 with ``do_center_crop=false`` hands its CLIP tower
a 336×448 image, and CLIP's position embeddings are fixed for
``vision_config.image_size`` (336×336; its forward interpolates only when
asked, ``interpolate_pos_encoding=False``), so HF's own model raises. Such a
setting is *not applicable to this checkpoint*: verify names it with the
reason and draws another one to judge the port under.

Each setting is decided on one item: the smallest reference item HF counts
differently under it (the item a port ignoring the setting gets wrong).

1. **Statically**, where a tower fixes its input: a sub-config with an
   ``image_size`` whose model class's ``forward`` takes
   ``interpolate_pos_encoding`` defaulting to false (and no outer method asks
   for interpolation). If HF's pixel tensor for the item has the tower's size
   under the defaults but another under the setting, the model cannot take it.
2. **Else dynamically**: HF's model runs one forward on HF's outputs for the
   item under the setting, as the ``model`` check's reference forward does
   (:mod:`mmport.verify.model_check`). The model is the one ``--model``
   built, else a tiny twin on the CPU (:mod:`mmport.hf.tiny`), built
   once per run and only when a setting needs it. A refusal counts only when
   the model takes an ordinary item of the modality under the defaults.

When neither can tell (no model class, the snapshot's own modeling code
without ``--trust-remote-code``, a twin that refuses the defaults too), the
setting is *undecided*: the port is judged under it, and the report says why.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmport.errors import FOREIGN_ERRORS, MmportError, one_line
from mmport.runtime.device import placement, release
from mmport.runtime.hf_model import HFModel, load_model, model_class
from mmport.verify.reference import HFOutput, HFReference
from mmport.verify.report import SettingFit
from mmport.verify.settings import Setting, telling_items

__all__ = ["FitJudge", "FixedInput", "fixed_inputs", "static_misfit"]

# Methods of the model class whose own default could ask a tower to interpolate.
_ENTRY_POINTS = ("forward", "get_image_features", "get_video_features")
# The basis a statically decided fit names (no model ran).
STATIC = "tower input size"


@dataclass(frozen=True)
class FixedInput:
    """A tower that takes one input size only.

    ``FixedInput("vision_config", "CLIPVisionModel", (336, 336), "transformers/models/clip/modeling_clip.py:600")``
    """

    config: str  # the sub-config's attribute: ``vision_config``
    tower: str  # its model class
    size: tuple[int, int]  # (height, width) of ``image_size``
    source: str  # file:line of the tower's ``forward``, whose signature says it does not interpolate


def _side_pair(value: Any) -> tuple[int, int] | None:
    """``image_size`` as (height, width): an integer side, or a pair of them."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, value
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and v > 0 for v in value)
    ):
        return value[0], value[1]
    return None


def _tower_class(sub_config: Any) -> type[Any] | None:
    """The model class transformers builds for a sub-config (``CLIPVisionConfig`` → ``CLIPVisionModel``)."""
    import transformers
    from transformers import AutoModel

    if type(sub_config) in AutoModel._model_mapping:
        return AutoModel._model_mapping[type(sub_config)]  # type: ignore[return-value]  # transformers types the lazy mapping's values as (slow, fast) pairs; model mappings hold one class
    # Towers AutoModel does not map (Blip2VisionConfig) are named after their config.
    found = getattr(
        transformers, type(sub_config).__name__.removesuffix("Config") + "Model", None
    )
    return found if isinstance(found, type) else None


def _interpolation_default(method: Any) -> Any:
    """The default of a method's ``interpolate_pos_encoding`` parameter; ``inspect.Parameter.empty`` without one."""
    parameter = (
        inspect.signature(method).parameters.get("interpolate_pos_encoding")
        if callable(method)
        else None
    )
    return parameter.default if parameter is not None else inspect.Parameter.empty


def _source(method: Any) -> str:
    """``transformers/models/clip/modeling_clip.py:600``: where a method is defined."""
    function = inspect.unwrap(method)
    path = Path(inspect.getsourcefile(function) or "?")
    parts = path.parts
    shown = (
        Path(*parts[parts.index("transformers") :])
        if "transformers" in parts
        else path.name
    )
    return f"{shown}:{inspect.getsourcelines(function)[1]}"


def fixed_inputs(config: Any) -> list[FixedInput]:
    """Towers of ``config`` that take ``image_size`` only: no interpolation unless asked, and nothing asks.

    Read from the towers' forward signatures, never from a list of families;
    a model class that defaults to interpolating (or none transformers has) fixes nothing here.
    """
    try:
        outer = model_class(config)
    except MmportError:
        return []
    if any(
        _interpolation_default(getattr(outer, name, None))
        not in (inspect.Parameter.empty, False, None)
        for name in _ENTRY_POINTS
    ):
        return []
    fixed = []
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        size = _side_pair(getattr(sub, "image_size", None))
        tower = _tower_class(sub) if size else None
        if (
            size is not None
            and tower is not None
            and _interpolation_default(tower.forward) in (False, None)
        ):
            fixed.append(FixedInput(name, tower.__name__, size, _source(tower.forward)))
    return fixed


def _pixel_sides(output: HFOutput) -> dict[str, tuple[int, int]]:
    """(height, width) of each image-like tensor HF returned: floating, ``(..., channels, height, width)``."""
    return {
        key: (v.shape[-2], v.shape[-1])
        for key, v in output.mm.items()
        if v.is_floating_point() and v.ndim >= 4
    }


def static_misfit(
    towers: list[FixedInput],
    default: HFOutput,
    under: HFOutput,
    item: str,
    described: str,
) -> str:
    """Why no tower takes HF's pixels under a setting, or "" when the static rule tells nothing.

    A tensor counts only if it has a tower's size under the defaults (so it is
    that tower's input) and another size under the setting.
    """
    before, after = _pixel_sides(default), _pixel_sides(under)
    for key, sides in after.items():
        for tower in towers:
            if before.get(key) == tower.size and sides != tower.size:
                return (
                    f"HF's processor gives `{key}` of {sides[0]}×{sides[1]} for {item} under {described}; {tower.tower} takes "
                    f"{tower.config}.image_size {tower.size[0]}×{tower.size[1]} only (its forward interpolates position "
                    f"embeddings only when asked, through interpolate_pos_encoding: {tower.source})"
                )
    return ""


def _refusal(model: HFModel, output: HFOutput) -> str:
    """HF's model on HF's own outputs for one item: "" when it runs, else its error in one line."""
    try:
        model.logits(output.inputs, [len(output.input_ids) - 1])
    except FOREIGN_ERRORS as exc:
        # the HF model refusing HF's processor outputs is the fact measured here
        return one_line(exc)
    finally:
        release(model.target)
    return ""


def _tiny_twin(snapshot: Any, seed: int) -> tuple[HFModel | None, str]:
    """A tiny twin of the snapshot's model on the CPU, or None and why it cannot be built."""
    auto_map = snapshot.config_dict.get("auto_map") or {}
    if any(str(key).startswith("AutoModel") for key in auto_map):
        return (
            None,
            "the snapshot's model class is its own code (auto_map), which no tiny twin is built from",
        )
    try:
        return load_model(
            snapshot, placement("cpu", "float32"), tiny=True, weights=False, seed=seed
        ), ""
    except (
        MmportError
    ) as exc:  # no model class, remote code without consent, a config HF refuses
        return None, str(exc)
    except FOREIGN_ERRORS as exc:
        # HF's own code failing to build the twin is the fact reported
        return None, f"its tiny twin cannot be built ({one_line(exc)})"


class FitJudge:
    """Decides once per setting, per verify run, whether the HF model takes it (see the module docstring)."""

    def __init__(
        self, hf: HFReference, model: HFModel | None = None, *, seed: int = 0
    ) -> None:
        self.hf = hf
        self.seed = seed
        self._model = model  # --model's model, else a tiny twin built when a setting first needs one
        self._model_kind = "the --model model" if model is not None else "tiny twin"
        self._model_tried = model is not None
        self._model_error = ""  # why no model could be built
        self._towers: list[FixedInput] | None = None
        self._fits: dict[str, SettingFit] = {}
        self._defaults_refused: dict[
            str, str
        ] = {}  # per modality: the model's error on an ordinary item, or ""
        self.model_seconds = (
            0.0  # spent building and running the model (what the dynamic rule costs)
        )

    def applicable(self, setting: Setting) -> bool:
        """False when the HF model cannot take what HF's processor gives under ``setting``."""
        return self.fit(setting).verdict != "not applicable"

    def fit(self, setting: Setting) -> SettingFit:
        """The setting's fit, decided on first asking and cached by its kwargs and modality."""
        key = f"{setting.modality}|{setting.key()}"
        if key not in self._fits:
            self._fits[key] = self._decide(setting)
        return self._fits[key]

    def not_applicable(self) -> list[SettingFit]:
        """Every setting decided so far that the model cannot take, in the order asked."""
        return [fit for fit in self._fits.values() if fit.verdict == "not applicable"]

    def undecided(self) -> list[SettingFit]:
        """Every setting decided so far whose fit could not be told (the port is judged under them)."""
        return [fit for fit in self._fits.values() if fit.verdict == "undecided"]

    def _fixed(self) -> list[FixedInput]:
        if self._towers is None:
            self._towers = fixed_inputs(self.hf.snapshot.load_config())
        return self._towers

    def _decide(self, setting: Setting) -> SettingFit:
        told = telling_items(self.hf, setting)
        if not told:
            return SettingFit(
                setting.modality,
                setting.describe(),
                "applicable",
                "HF counts no reference item differently under it",
            )
        item, described = told[0], setting.describe()
        under = self.hf.single(item, setting)
        reason = static_misfit(
            self._fixed(), self.hf.single(item), under, item.describe(), described
        )
        if reason:
            return SettingFit(
                item.modality,
                described,
                "not applicable",
                reason,
                STATIC,
                item.describe(),
            )
        return self._run(item, described, under)

    def _run(self, item: Any, described: str, under: HFOutput) -> SettingFit:
        """The dynamic rule: HF's model on HF's outputs for ``item`` under the setting."""
        model = self._the_model()
        if model is None:
            return SettingFit(
                item.modality,
                described,
                "undecided",
                f"no HF model to run: {self._model_error}",
                "",
                item.describe(),
            )
        basis = f"{model.name} ({self._model_kind})"
        error = self._timed(_refusal, model, under)
        if not error:
            return SettingFit(
                item.modality, described, "applicable", "", basis, item.describe()
            )
        # Only now is the control needed: a refusal tells only if the model takes ordinary items.
        refused = self._defaults_refusal(model, item.modality)
        if refused:
            reason = f"{basis} refuses an ordinary {item.modality} under the defaults too ({refused})"
            return SettingFit(
                item.modality, described, "undecided", reason, basis, item.describe()
            )
        reason = f"HF's {model.name} raises on HF's outputs for {item.describe()} under {described}: {error}"
        return SettingFit(
            item.modality, described, "not applicable", reason, basis, item.describe()
        )

    def _timed(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, its time added to :attr:`model_seconds`."""
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.model_seconds += time.perf_counter() - started

    def _the_model(self) -> HFModel | None:
        if not self._model_tried:
            self._model_tried = True
            self._model, self._model_error = self._timed(
                _tiny_twin, self.hf.snapshot, self.seed
            )
        return self._model

    def _defaults_refusal(self, model: HFModel, modality: str) -> str:
        """The model's error on the smallest reference item under the defaults ("" when it runs), once per modality.

        A model that refuses ordinary items too (a synthetic config at odds with
        its processor) says nothing about any setting.
        """
        if modality not in self._defaults_refused:
            ordinary = self.hf.single(self.hf.reference_items(modality)[0])
            self._defaults_refused[modality] = self._timed(_refusal, model, ordinary)
        return self._defaults_refused[modality]
