"""The ``model`` check: the port's placeholders and kwargs against the HF model.

Per probe, two things must hold for the port to serve:

- per item of every modality whose encoder the HF model exposes
  (``get_<modality>_features``), the encoder, fed the item's kwargs as the
  port's field config cut them, produces exactly as many feature vectors as
  the port marks embedding positions (vLLM asserts this at serving time), and
  the same features HF's own one-item kwargs give;
- the HF model's logits on the port's token ids plus the port's per-item
  kwargs re-batched match its logits on the HF processor's own outputs, at
  every text position (see :func:`_text_positions`).
"""

from __future__ import annotations

from typing import Any

from mmport.errors import FOREIGN_ERRORS, BadReferenceError, one_line
from mmport.runtime.device import release
from mmport.runtime.hf_model import HFModel
from mmport.runtime.runner import PortOutput
from mmport.verify.rebatch import rebatch
from mmport.verify.reference import HFOutput
from mmport.verify.report import CheckResult, Failure, Loudness

__all__ = ["ModelCheck"]


def _max_diff(a: Any, b: Any) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


class ModelCheck:
    """Feeds one probe's HF and port outputs to the HF model and compares."""

    def __init__(
        self, model: HFModel, embed_ids: dict[str, int], result: CheckResult
    ) -> None:
        self.model = model
        self.embed_ids = embed_ids  # per modality: the token its embeddings go to
        self.result = result
        self.max_logit_diff = 0.0
        self.max_feature_diff = 0.0
        self.items_checked: dict[
            str, int
        ] = {}  # per modality: items whose features were compared
        self.no_encoder: set[str] = (
            set()
        )  # modalities probed whose encoder the model does not expose
        self.unrunnable_settings: set[str] = (
            set()
        )  # request settings under which HF's model refuses HF's outputs
        # Probes whose items HF's model runs alone but not together as the
        # probe's prompt writes them (items side by side without the chat
        # template's wrapping tokens, which a model may look for: Qwen2-VL's
        # rotary positions find an image by the vision-start token before it).
        self.unrunnable_layouts: list[str] = []

    def _fail(
        self,
        probe: str,
        message: str,
        expected: Any = None,
        actual: Any = None,
        *,
        loudness: Loudness,
    ) -> None:
        expected, actual = (None if v is None else str(v) for v in (expected, actual))
        self.result.failures.append(
            Failure(probe, message, None, expected, actual, loudness=loudness)
        )

    def run_probe(
        self,
        probe: str,
        modalities: list[str],
        singles: list[HFOutput],
        expected: HFOutput,
        actual: PortOutput,
        setting: str | None = None,
    ) -> None:
        """Apply both model checks to one probe; ``singles`` are HF's outputs per item alone,
        ``modalities`` each item's modality, in the probe's order, ``setting`` the request
        settings both ran under (described), if any."""
        positions = _text_positions(expected.input_ids, set(self.embed_ids.values()))
        try:
            reference = self._reference_logits(expected, positions)
        except BadReferenceError:
            release(self.model.target)
            if len(singles) > 1 and self._each_runs(singles):
                # The prompt's layout, not the snapshot or the setting: there is no
                # reference to judge this probe by; the other probes still judge.
                self.unrunnable_layouts.append(probe)
                return
            if setting is None:
                raise
            # A request setting the checkpoint cannot take (a merge size its vision
            # tower was not built for): HF's own model refuses HF's own outputs.
            self.unrunnable_settings.add(setting)
            return
        self.result.runs += 1
        try:
            for modality in dict.fromkeys(modalities):
                alone = [
                    single
                    for single, m in zip(singles, modalities, strict=False)
                    if m == modality
                ]
                if not self._check_items(probe, modality, alone, actual):
                    return
            self._check_logits(probe, expected, actual, positions, reference)
        finally:
            release(self.model.target)

    def _check_items(
        self, probe: str, modality: str, singles: list[HFOutput], actual: PortOutput
    ) -> bool:
        """The per-item encoder check for one modality; False when the port's items cannot be matched up."""
        placeholders = actual.placeholders.get(modality, [])
        items = actual.items.get(modality, [])
        if len(items) != len(singles) or len(placeholders) != len(singles):
            message = f"items and placeholders the port returned for the {modality}s"
            self._fail(
                probe,
                message,
                len(singles),
                f"{len(items)} items, {len(placeholders)} placeholders",
                loudness="loud",
            )
            return False
        if not self.model.has_features(modality):
            self.no_encoder.add(modality)
            return True
        for index, single in enumerate(singles):
            self._check_item(
                probe,
                modality,
                index,
                single,
                items[index],
                placeholders[index].num_embeds,
            )
        self.items_checked[modality] = self.items_checked.get(modality, 0) + len(
            singles
        )
        return True

    def _item_kwargs(
        self, probe: str, name: str, item: dict, like: dict
    ) -> dict | None:
        """The item's kwargs in HF's one-item layout, or None after reporting why not."""
        kwargs = {}
        for key, value in item.items():
            if key not in like:
                continue  # a key HF's processor does not return for one item
            layout = rebatch([value], like[key])
            if layout is None:
                message = f"{name}: the port's `{key}` fits no layout of HF's one-item `{key}`"
                self._fail(
                    probe,
                    message,
                    tuple(like[key].shape),
                    tuple(getattr(value, "shape", ())),
                    loudness="loud",
                )
                return None
            kwargs[key] = layout.value
        return kwargs

    def _check_item(
        self,
        probe: str,
        modality: str,
        index: int,
        single: HFOutput,
        item: dict,
        num_embeds: int,
    ) -> None:
        name = f"{modality} {index}" if modality != "image" else f"item {index}"
        kwargs = self._item_kwargs(probe, name, item, single.mm)
        if kwargs is None:
            return
        try:
            features = self.model.features(modality, kwargs)
        except FOREIGN_ERRORS as exc:
            self._fail(
                probe,
                f"{name}: the HF encoder raised on the port's kwargs: {one_line(exc)}",
                loudness="loud",
            )
            return
        count = sum(f.shape[0] for f in features)
        if count != num_embeds:
            message = f"{name}: feature vectors from the HF encoder vs embedding positions the port marks"
            self._fail(probe, message, count, num_embeds, loudness="loud")
            return
        reference = self.model.features(modality, single.mm)
        shapes = [tuple(f.shape) for f in reference], [tuple(f.shape) for f in features]
        if shapes[0] != shapes[1]:
            self._fail(
                probe,
                f"{name}: encoder output shapes on the port's kwargs vs HF's",
                *shapes,
                loudness="loud",
            )
            return
        diff = max(map(_max_diff, reference, features), default=0.0)
        self.max_feature_diff = max(self.max_feature_diff, diff)
        scale = max((float(f.abs().max()) for f in reference if f.numel()), default=0.0)
        if not diff <= self.model.target.tolerance(scale):
            keys = (
                ", ".join(k for k in kwargs if not _same(kwargs[k], single.mm[k]))
                or "none of the inputs"
            )
            message = f"{name}: encoder features on the port's kwargs differ from HF's (max |Δ| {diff:.3g})"
            self._fail(probe, f"{message}; diverging: {keys}", loudness="silent")

    def _check_logits(
        self,
        probe: str,
        expected: HFOutput,
        actual: PortOutput,
        positions: list[int],
        reference: Any,
    ) -> None:
        """The port's ids and re-batched kwargs against HF's ``reference`` logits at ``positions``."""
        if len(actual.prompt_token_ids) != len(expected.input_ids):
            message = "logits not compared: the port's prompt has another length than HF's (see tokens)"
            self._fail(
                probe,
                message,
                len(expected.input_ids),
                len(actual.prompt_token_ids),
                loudness="silent",
            )
            return
        rebatched = self._port_inputs(probe, expected, actual)
        if rebatched is None:
            return
        inputs, segments = rebatched
        try:
            logits = self.model.logits(inputs, positions)
        except FOREIGN_ERRORS as exc:
            self._fail(
                probe,
                f"the HF model raised on the port's ids and kwargs: {one_line(exc)}",
                loudness="loud",
            )
            return
        diff = _max_diff(reference, logits)
        self.max_logit_diff = max(self.max_logit_diff, diff)
        tolerance = self.model.target.tolerance(float(reference.abs().max()))
        if not diff <= tolerance:
            message = f"logits differ from HF's forward on its own outputs: max |Δ| {diff:.3g} > {tolerance:.3g}"
            self._fail(
                probe,
                message + _diverging(inputs, expected.mm, segments),
                loudness="silent",
            )

    def _port_inputs(
        self, probe: str, expected: HFOutput, actual: PortOutput
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """HF's forward inputs with the port's ids and its per-item kwargs re-batched as HF batches them,
        and each key's segments; None (failed loudly) where a key re-batches into no layout of HF's."""
        import torch

        inputs = {
            **expected.inputs,
            "input_ids": torch.tensor([actual.prompt_token_ids]),
        }
        for key in expected.mm:
            inputs.pop(key)
        segments = {}
        for key in expected.mm:
            values: list[Any] = [
                item[key]
                for items in actual.items.values()
                for item in items
                if key in item
            ]  # the port's tensors
            if not values:
                continue  # the port drops this key; the forward shows whether HF needed it
            layout = rebatch(values, expected.mm[key])
            if layout is None:
                message = f"the port's per-item `{key}` re-batch into no layout of HF's `{key}`"
                self._fail(
                    probe,
                    message,
                    tuple(expected.mm[key].shape),
                    [tuple(v.shape) for v in values],
                    loudness="loud",
                )
                return None
            inputs[key], segments[key] = layout.value, layout.segments
        return inputs, segments

    def _each_runs(self, singles: list[HFOutput]) -> bool:
        """Whether HF's model runs on each item's outputs alone."""
        embed_ids = set(self.embed_ids.values())
        try:
            for single in singles:
                self.model.logits(
                    single.inputs, _text_positions(single.input_ids, embed_ids)
                )
        except FOREIGN_ERRORS:
            return False
        finally:
            release(self.model.target)
        return True

    def _reference_logits(self, expected: HFOutput, positions: list[int]) -> Any:
        """HF's forward on its own outputs; failing here is the snapshot's fault, not the port's."""
        try:
            return self.model.logits(expected.inputs, positions)
        except FOREIGN_ERRORS as exc:
            raise BadReferenceError(
                f"the HF model cannot run on its own processor's outputs ({one_line(exc)}); "
                "the snapshot's config and processor settings disagree"
            ) from None

    def summarize(self) -> None:
        """Record what a run measured, for the report."""
        self.result.metrics = {
            "max_logit_diff": self.max_logit_diff,
            "max_feature_diff": self.max_feature_diff,
            "parameters": float(self.model.num_parameters),
            **{
                f"{modality}_items_encoded": float(count)
                for modality, count in self.items_checked.items()
            },
        }
        target = self.model.target
        checked = (
            ", ".join(
                f"{count} {modality}(s)"
                for modality, count in self.items_checked.items()
            )
            or "no items"
        )
        summary = (
            f"{self.model.name} ({self.model.num_parameters / 1e6:.1f}M params, {target.device.type} {target.dtype_name}): "
            f"max |Δlogits| {self.max_logit_diff:.3g}, max |Δfeatures| {self.max_feature_diff:.3g} over {checked}"
        )
        if self.unrunnable_settings:
            said = "; ".join(sorted(self.unrunnable_settings))
            summary += f"; not run under {said}: HF's model refuses HF's own outputs there (the checkpoint was not built for it)"
        if self.unrunnable_layouts:
            said = ", ".join(dict.fromkeys(self.unrunnable_layouts))
            summary += (
                f"; not compared on {said}: HF's model runs each of its items alone but "
                "not together as the prompt writes them (bare placeholders side by side; "
                "a snapshot without a chat template has no wrapping tokens to write)"
            )
        if self.no_encoder:
            exposed = ", ".join(f"get_{m}_features" for m in sorted(self.no_encoder))
            summary += f"; the model exposes no {exposed}, so those items were judged by the logits alone"
        self.result.summary = summary


def _text_positions(input_ids: list[int], embed_ids: set[int]) -> list[int]:
    """Positions whose logits are compared: every one that is not an item's embedding.

    A served model reads logits at text positions, and through attention each
    of them depends on every item embedding before it; the logits at embedding
    positions themselves are never sampled.
    """
    return [i for i, token in enumerate(input_ids) if token not in embed_ids] or [
        len(input_ids) - 1
    ]


def _same(a: Any, b: Any) -> bool:
    import torch

    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and torch.equal(a, b)
    )


def _diverging(inputs: dict, reference: dict, segments: dict) -> str:
    """Which re-batched tensor differs from HF's, and the first item whose part differs."""
    for key, segs in segments.items():
        if _same(inputs[key], reference[key]):
            continue
        if inputs[key].shape != reference[key].shape:
            return f"; diverging: `{key}` shape {tuple(inputs[key].shape)} vs HF {tuple(reference[key].shape)}"
        for index, segment in enumerate(segs):
            if not _same(inputs[key][segment], reference[key][segment]):
                return f"; diverging: `{key}` of item {index}"
        return f"; diverging: `{key}`"
    return "; every re-batched tensor equals HF's, so the token ids differ"
