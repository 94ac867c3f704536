"""One verify run: the HF reference and the port runner, probe by probe, modality by modality.

The gate fails closed: a probe HF rejects is listed with HF's reason, an item
HF expands to nothing (which no vLLM port can hold) is named and left out of
its probe, and :meth:`Session.finish` fails every check that compared
nothing, and ``tokens`` when fewer than half of the probes with items could
be compared. Where the port or HF raises because the snapshot lacks what real
checkpoints carry (:mod:`mmport.verify.lacking`), the probe cannot be judged:
it is recorded as such, never as a failure, and a check it left with nothing
compared cannot judge rather than fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from mmport.errors import FOREIGN_ERRORS, one_line
from mmport.verify.checks import (
    check_cache,
    check_company_hash,
    check_fields,
    check_placeholders,
    check_tokens,
    embed_positions,
    token_window,
)
from mmport.verify.company import among_copies, company_note
from mmport.verify.lacking import (
    SnapshotFacts,
    snapshot_lacks,
    unheld_token_texts,
    unset_config_reads,
)
from mmport.verify.probes import MAX_PROBE_ITEMS, Item, Probe, port_data
from mmport.verify.reference import HFOutput, HFReference
from mmport.verify.report import (
    CannotJudge,
    CheckResult,
    Failure,
    Lacking,
    TokenWindow,
)
from mmport.verify.settings import Setting
from mmport.verify.tokenizing import follow_port_tokenizing

__all__ = ["Session"]


def _larger_than(dummy, modality: str, sampling_rate: int | None) -> list[Item]:
    """Items a step larger than the port's dummy item: twice the frames, twice the sides, twice the length."""
    if modality == "video":
        count, height, width = _video_geometry(dummy)
        larger = (
            [Item("video", (width * 2, height * 2), count, 2.0)]
            if max(width, height) * 2 <= WORST_CASE_SIDE
            else []
        )
        if count * 2 <= WORST_CASE_FRAMES:
            larger.insert(0, Item("video", (width, height), count * 2, 2.0))
        return larger
    audio = dummy[0] if isinstance(dummy, tuple) else dummy
    seconds = 2 * len(audio) / (sampling_rate or 16_000)
    return [Item("audio", seconds=seconds)] if seconds <= WORST_CASE_SECONDS else []


def _video_geometry(dummy) -> tuple[int, int, int]:
    """A dummy video's frame count, height and width: an array of frames, a list of frames (arrays or
    PIL images, as MiniCPM-V's dummy builder gives), either with its metadata as a ``(frames, metadata)`` pair."""
    frames = dummy[0] if isinstance(dummy, tuple) else dummy
    if hasattr(frames, "shape"):
        return len(frames), frames.shape[1], frames.shape[2]
    first = frames[0]
    width, height = (
        (first.shape[1], first.shape[0]) if hasattr(first, "shape") else first.size
    )
    return len(frames), height, width


def _only_longer(item: Item, dummy, sampling_rate: int | None) -> bool:
    """True when ``item`` is longer than the dummy and no larger otherwise: more frames of the same size, or a longer audio."""
    if item.modality == "image":
        return False  # an image has no length: a smaller dummy image is a miscount
    if item.modality == "audio":
        return item.seconds > _audio_seconds(dummy, sampling_rate)
    count, height, width = _video_geometry(dummy)
    return item.size == (width, height) and (item.frames or 0) > count


def _audio_seconds(dummy, sampling_rate: int | None) -> float:
    """A dummy audio's length in seconds at HF's sampling rate (a port's dummy audio is at its extractor's)."""
    audio = dummy[0] if isinstance(dummy, tuple) else dummy
    return len(audio) / (sampling_rate or 16_000)


# Items asked of the port's dummy builder, and the item count probed for
# "unlimited" when a port declares no limit.
DUMMY_ITEMS = 2
UNLIMITED_PROBE = 3
DUMMY_SEQ_LEN = 1 << 16
# The longest video, and the largest frame side, the worst case ranges over
# (vLLM's loaders sample to a frame count; frames are rarely larger).
WORST_CASE_FRAMES = 32
WORST_CASE_SIDE = 2048
# The longest audio it ranges over (ten minutes: a long recording, well past one window).
WORST_CASE_SECONDS = 600
# What a check that compared nothing had to have, in words.
NEEDS = {
    "tokens": "no probe HF answered",
    "placeholders": "no probe with items HF answered",
    "fields": "no probe with items HF answered",
    "cache": "no probe with items the port processed",
    "dummy": "none of the port's dummy inputs",
    "limits": "none of the port's limits",
    "embeds": "no item HF answered, given to the port as embeddings,",
}


class Session:
    """Runs probes through both sides and feeds the checks."""

    def __init__(self, hf: HFReference, runner, model_check=None) -> None:
        self.hf = hf
        self.runner = runner
        self.model_check = model_check  # a ModelCheck with --model, else None
        # Per modality: the largest count HF gave an item alone, and that item.
        self.max_count: dict[str, int] = {}
        self.largest_item: dict[str, Item] = {}
        self._length_noted: set[str] = set()  # modalities whose dummy length was noted
        self.rejected: list[str] = []  # probes HF rejects, with HF's reason
        # Items or probes HF answers in a way vLLM cannot hold.
        self.outside_contract: list[str] = []
        # Modality -> the most items HF processes as alone, where a probe held more and the
        # port followed HF's prompt (see mmport.verify.company).
        self.company: dict[str, int] = {}
        # Probes with items within the port's limits, and those HF answered and the checks
        # compared: under the default settings, and under a request's settings.
        self.defaults = {"media": 0, "compared": 0}
        self.under_settings = {"media": 0, "compared": 0}
        # Settings the port refuses outright, with its words.
        self.refused_settings: dict[str, str] = {}
        # Per modality: items drawn into probes within the limits, and those compared against HF.
        self.drawn: dict[str, int] = {}
        self.judged: dict[str, int] = {}
        # Per probe whose tokens differ: both sides around the first difference.
        self.token_windows: dict[str, TokenWindow] = {}
        self.facts = SnapshotFacts.of(
            getattr(hf.processor, "tokenizer", None),
            hf.snapshot.load_config(),
            invented=hf.snapshot.origin == "synthetic",
        )
        # Every probe the snapshot kept from being judged, either side; and those HF itself raised on.
        self.unjudged: list[CannotJudge] = []
        self.hf_unjudged: list[CannotJudge] = []
        self.settings_of: dict[str, str] = {}  # probe name -> its request settings
        self.limits_raised: Exception | None = None
        self._hf_item_limits: dict[str, int] = {}  # see hf_item_limit
        self.limits, self.limits_error = self._port_limits()
        # Modalities the port declares it does not support (a limit of 0, or none at all:
        # vLLM allows "at most 0" of a modality the port leaves out): vLLM refuses such
        # items loudly, so they are named, not probed.
        loaded = self.limits_raised is None
        self.unsupported = [
            m
            for m in self.hf.modalities
            if self.limits.get(m) == 0 or (loaded and m not in self.limits)
        ]
        self.limits = {
            m: limit for m, limit in self.limits.items() if m not in self.unsupported
        }
        if (
            loaded
            and self.hf.modalities
            and set(self.unsupported) >= set(self.hf.modalities)
        ):
            self._unjudged_modalities()
        self.tokenizing_note = follow_port_tokenizing(hf, runner.adds_special_tokens())

    def _unjudged_modalities(self) -> None:
        """The port supports none of HF's modalities: cannot judge, where it reads config attributes the snapshot leaves unset."""
        for lacking in unset_config_reads(self.runner.supported_mm_limits)[:1]:
            self.unjudged.append(
                CannotJudge(
                    "limits",
                    lacking,
                    "port",
                    "nothing: its get_supported_mm_limits() switched off every modality HF handles",
                )
            )

    def _port_limits(self) -> tuple[dict[str, int | None], str]:
        try:
            return dict(self.runner.supported_mm_limits()), ""
        except FOREIGN_ERRORS as exc:
            self.limits_raised = exc
            return {}, f"the port's get_supported_mm_limits raises {one_line(exc)}"

    def _raised(
        self,
        result: CheckResult,
        probe: str,
        exc: Exception,
        message: str,
        side: Literal["port", "hf"] = "port",
        modalities: tuple[str, ...] = (),
        lacking: Lacking | None = None,
    ) -> bool:
        """``side`` raised: cannot judge when the snapshot lacks what it looked up, else a loud failure.

        True when it was a failure (a comparison made, and failed); ``modalities``
        are what it concerns, for a probe that holds no items of its own;
        ``lacking``, what the snapshot is already known to lack for it.
        """
        if self.cannot_judge(result, probe, exc, side, lacking):
            return False
        result.failures.append(
            Failure(probe, message, loudness="loud", modalities=modalities)
        )
        return True

    def cannot_judge(
        self,
        result: CheckResult,
        probe: str,
        exc: Exception,
        side: Literal["port", "hf"] = "port",
        lacking: Lacking | None = None,
    ) -> bool:
        """Record ``probe`` as unjudged in ``result`` when ``exc`` comes of what the snapshot lacks
        (``lacking``, or what ``exc`` itself shows); True if it does."""
        lacking = lacking or snapshot_lacks(exc, self.facts)
        if lacking is None:
            return False
        unjudged = CannotJudge(probe, lacking, side, one_line(exc))
        result.unjudged.append(unjudged)
        self.unjudged.append(unjudged)
        return True

    def _gate(self, result: CheckResult, failure: Failure) -> None:
        """A gate's failure (too little compared), or cannot judge where the snapshot kept probes from being compared."""
        if self.unjudged:
            result.unjudged.append(self.unjudged[0])
        else:
            result.failures.append(failure)

    def probe_limits(self) -> dict[str, int]:
        """Per modality HF handles: the most items a probe may carry (the port's limit, if it declares one).

        A modality the port does not declare is still probed: HF handles it,
        so vLLM's users will send it, and the port must fail there.
        """
        limits = {}
        for modality in self.hf.modalities:
            if modality in self.unsupported:
                continue
            limit = self.limits.get(modality)
            limits[modality] = min(
                self.hf_item_limit(modality),
                MAX_PROBE_ITEMS
                if limit is None
                else max(1, min(MAX_PROBE_ITEMS, limit)),
            )
        return limits

    def hf_item_limit(self, modality: str) -> int:
        """The most items of ``modality`` HF takes in one prompt: 1 where it takes one and refuses two, else unbounded.

        A probe carrying more than HF takes is rejected whatever the port
        does, so such probes would only hide the comparisons; the limits
        check reports a port that allows more than HF (GLM-ASR under
        transformers 5.20 takes one audio per text).
        """
        if modality not in self._hf_item_limits:
            self._hf_item_limits[modality] = (
                1
                if self._hf_takes(modality, 1) and not self._hf_takes(modality, 2)
                else MAX_PROBE_ITEMS
            )
        return self._hf_item_limits[modality]

    def _hf_takes(self, modality: str, count: int) -> bool:
        """True when HF answers a prompt of ``count`` small ``modality`` items."""
        placeholder = self.hf.modalities[modality].placeholder or ""
        try:
            self.hf.run(
                placeholder * count + " limits", self._limit_items(modality, count)
            )
        except FOREIGN_ERRORS:  # HF's refusal is the answer
            return False
        return True

    def max_probe_items(self) -> int:
        """Images per probe: up to :data:`MAX_PROBE_ITEMS`, within the port's declared limit."""
        return self.probe_limits().get("image", MAX_PROBE_ITEMS)

    def port(self, prompt: str, items: list[Item], setting: Setting | None = None):
        """The port on ``prompt`` with ``items`` (under ``setting``'s request kwargs); raises what the port raises."""
        return self.runner.process(
            prompt,
            port_data(items, self.hf.sampling_rate),
            setting.kwargs if setting else None,
        )

    def _beyond_limits(self, probe: Probe) -> bool:
        return any(
            (limit := self.limits.get(m)) is not None and len(probe.of(m)) > limit
            for m in dict.fromkeys(i.modality for i in probe.items)
        )

    def run_probe(
        self,
        probe: Probe,
        checks: dict[str, CheckResult],
        setting: Setting | None = None,
    ) -> None:
        """Run one probe through HF and the port and apply the per-probe checks.

        With a ``setting``, both run under the request's processor kwargs it
        holds; the worst case is the default settings' (vLLM profiles under
        the engine's settings, not a request's), so such counts do not raise it.
        """
        if self._beyond_limits(probe):
            return  # beyond the port's declared limit: check_limits judges that limit
        tally = self.under_settings if setting else self.defaults
        tally["media"] += bool(probe.items)
        if setting is not None:
            self.settings_of[probe.name] = setting.describe()
        self.drawn.update(
            (m, self.drawn.get(m, 0) + len(probe.of(m)))
            for m in dict.fromkeys(i.modality for i in probe.items)
        )
        answered = self._answer(probe, setting)
        if answered is None:
            return
        probe, expected, singles, counts = answered
        tally["compared"] += bool(probe.items)
        for item in probe.items:
            self.judged[item.modality] = self.judged.get(item.modality, 0) + 1
        if setting is None:
            self._note_largest(probe, counts)
        unheld = self._in_company(probe, expected, counts)
        actual = self._port_answer(probe, expected, checks, tally, setting)
        if actual is None:
            return
        unheld, singles, counts, beyond = self._held(
            probe, expected, actual, unheld, singles, counts, setting
        )
        self._compare(
            probe,
            checks,
            expected,
            singles,
            counts,
            actual,
            unheld is not None,
            setting,
        )
        if probe.items:
            # The port alone, whatever HF does: vLLM's cache needs its items independent.
            self._check_cache(probe, checks["cache"], actual, setting, beyond)

    def _answer(
        self, probe: Probe, setting: Setting | None = None
    ) -> tuple[Probe, HFOutput, list[HFOutput], list[int]] | None:
        """HF on the probe and on each item alone; items HF gives no position are left out and named."""
        prompt = probe.prompt(self.hf.placeholders())
        try:
            expected = self.hf.run(prompt, list(probe.items), setting)
            singles = [
                self.hf.single(item, setting) for item in probe.items
            ]  # HF on each item alone
        except FOREIGN_ERRORS as exc:  # HF rejects this input (or an item alone)
            self._rejected(probe, exc, setting)
            return None
        counts = [
            s.input_ids.count(self.hf.modalities[i.modality].embed_id)
            for s, i in zip(singles, probe.items, strict=True)
        ]
        empty = {index for index, count in enumerate(counts) if count == 0}
        if not empty:
            return probe, expected, singles, counts
        # vLLM needs at least one position per item, so no port can hold these items.
        for index in sorted(empty):
            self.outside_contract.append(
                f"{probe.name}: HF gives {probe.items[index].describe()} no embedding positions"
            )
        return self._answer(probe.without(empty), setting)

    def _rejected(self, probe: Probe, exc: Exception, setting: Setting | None) -> None:
        """HF raised on a probe: listed with HF's reason, or unjudged when the snapshot lacks what HF looked up."""
        lacking = snapshot_lacks(exc, self.facts)
        if lacking is None:
            described = ", ".join(item.describe() for item in probe.items) or "no items"
            self.rejected.append(f"{probe.name} ({described}): {one_line(exc)}")
            return
        unjudged = CannotJudge(probe.name, lacking, "hf", one_line(exc))
        self.unjudged.append(unjudged)
        self.hf_unjudged.append(unjudged)
        tally = self.under_settings if setting else self.defaults
        tally["lacking"] = tally.get("lacking", 0) + bool(probe.items)

    def _in_company(
        self, probe: Probe, expected: HFOutput, counts: list[int]
    ) -> str | None:
        """What to say when HF counts some item differently beside the probe's others than alone
        (LLaVA-OneVision), else None."""
        for embed_id in dict.fromkeys(
            self.hf.modalities[i.modality].embed_id for i in probe.items
        ):
            alone = [
                c
                for i, c in zip(probe.items, counts, strict=False)
                if self.hf.modalities[i.modality].embed_id == embed_id
            ]
            together = expected.input_ids.count(embed_id)
            if len(alone) > 1 and together != sum(alone):
                # vLLM processes (and caches) each item alone: unless the port processes such
                # prompts whole (see _company), it cannot match HF's prompt here.
                return (
                    f"{probe.name} (HF gives its {len(alone)} items {together} embedding positions together, "
                    f"{'+'.join(map(str, alone))} alone; compared item by item)"
                )
        return None

    def _port_answer(
        self,
        probe: Probe,
        expected: HFOutput,
        checks: dict[str, CheckResult],
        tally: dict[str, int],
        setting: Setting | None,
    ):
        """The port's answer for the probe, or None (the raise noted) when it raises."""
        try:
            return self.port(expected.prompt, list(probe.items), setting)
        except NotImplementedError as exc:
            if setting is None:
                checks["tokens"].runs += 1
                checks["tokens"].failures.append(
                    Failure(
                        probe.name, f"the port raised {one_line(exc)}", loudness="loud"
                    )
                )
                return None
            # Said outright, a request fails rather than getting wrong tokens: named, not judged.
            self.refused_settings.setdefault(setting.describe(), one_line(exc))
            tally["compared"] -= bool(probe.items)
            tally["media"] -= bool(probe.items)
            return None
        except FOREIGN_ERRORS as exc:
            if self._raised(
                checks["tokens"], probe.name, exc, f"the port raised {one_line(exc)}"
            ):
                checks["tokens"].runs += 1
            return None

    def _note_largest(self, probe: Probe, counts: list[int]) -> None:
        """Keep, per modality, the largest count HF gave an item alone, and that item."""
        for item, count in zip(probe.items, counts, strict=False):
            if count > self.max_count.get(item.modality, 0):
                self.max_count[item.modality] = count
                self.largest_item[item.modality] = item

    def _held(
        self,
        probe: Probe,
        expected: HFOutput,
        actual,
        unheld: str | None,
        singles: list[HFOutput],
        counts: list[int],
        setting: Setting | None,
    ) -> tuple[str | None, list[HFOutput], list[int], set[int]]:
        """Where HF counts items otherwise together (``unheld`` says how), the references the port
        is held to in company (see :meth:`_company`), else ``unheld`` noted as outside the contract."""
        if unheld is None:
            return None, singles, counts, set()
        company = self._company(probe, expected, actual, setting)
        if company is None:
            self.outside_contract.append(unheld)
            return unheld, singles, counts, set()
        return None, *company

    def _company(
        self, probe: Probe, expected: HFOutput, actual, setting: Setting | None
    ) -> tuple[list[HFOutput], list[int], set[int]] | None:
        """Each item's reference in company, where the port follows HF's prompt and HF processes
        items as alone only in prompts of fewer than the probe holds (DeepSeek-VL2); else None.

        An item beyond that number is compared with its share of HF's answer for
        as many copies of it (see :mod:`mmport.verify.company`); its index is
        returned among the third value's, for the cache check.
        """
        if actual.prompt_token_ids != expected.input_ids:
            return None
        singles, beyond = [], set()
        for index, item in enumerate(probe.items):
            held = len(probe.of(item.modality))
            limit = self.hf.alone_up_to(item.modality)
            if limit is None or held <= limit:
                singles.append(self.hf.single(item, setting))
                continue
            singles.append(among_copies(self.hf, item, held, setting))
            beyond.add(index)
        counts = [
            s.input_ids.count(self.hf.modalities[i.modality].embed_id)
            for s, i in zip(singles, probe.items, strict=True)
        ]
        if not beyond or self._in_company(probe, expected, counts) is not None:
            return None
        for index in beyond:
            modality = probe.items[index].modality
            self.company[modality] = self.hf.alone_up_to(modality) or 0
        return singles, counts, beyond

    def _overwritten(
        self, hf_ids: list[int], placeholders: Mapping[str, list]
    ) -> frozenset[int]:
        """Positions where HF writes an embedding token and the port puts an embedding (vLLM replaces the id there)."""
        embed_ids = {ref.embed_id for ref in self.hf.modalities.values()}
        port_positions = {
            p
            for ranges in placeholders.values()
            for ph in ranges
            for p in embed_positions(ph)
        }
        return frozenset(
            p for p in port_positions if p < len(hf_ids) and hf_ids[p] in embed_ids
        )

    def _compare(
        self,
        probe,
        checks,
        expected: HFOutput,
        singles: list[HFOutput],
        counts: list[int],
        actual,
        in_company: bool,
        setting: Setting | None = None,
    ) -> None:
        """The port's answer against HF's: tokens, then (with items) placeholders and fields.

        Where HF counts items differently together (``in_company``), the prompt
        cannot match; each item is still compared with HF on it alone.
        """
        if not in_company:
            overwritten = self._overwritten(expected.input_ids, actual.placeholders)
            position = check_tokens(
                checks["tokens"],
                probe.name,
                expected.input_ids,
                actual.prompt_token_ids,
                overwritten,
            )
            if position is not None:
                self.token_windows[probe.name] = token_window(
                    expected.input_ids, actual.prompt_token_ids, position, self.hf.spell
                )
            if self.model_check is not None:
                modalities = [item.modality for item in probe.items]
                self.model_check.run_probe(
                    probe.name,
                    modalities,
                    singles,
                    expected,
                    actual,
                    setting.describe() if setting else None,
                )
        if not probe.items:
            return
        embed_ids = {m: ref.embed_id for m, ref in self.hf.modalities.items()}
        hf_ids = None if in_company else expected.input_ids
        check_placeholders(
            checks["placeholders"],
            probe.name,
            hf_ids,
            embed_ids,
            probe.items,
            counts,
            actual.placeholders,
        )
        check_fields(
            checks["fields"],
            probe.name,
            expected.mm,
            probe.items,
            [s.mm for s in singles],
            actual,
        )

    def _check_cache(
        self,
        probe: Probe,
        result: CheckResult,
        actual,
        setting: Setting | None = None,
        beyond: set[int] = frozenset(),  # type: ignore[assignment]  # read only
    ) -> None:
        """The port's items together equal each processed alone; an item HF processes otherwise in
        company (``beyond``) equals it among as many copies, and hashes apart from itself alone."""
        try:
            alone = [
                self.port(self.hf.single(item, setting).prompt, [item], setting)
                for item in probe.items
            ]
            among = [
                self._port_among_copies(probe, item, setting)
                if index in beyond
                else solo
                for index, (item, solo) in enumerate(
                    zip(probe.items, alone, strict=True)
                )
            ]
        except FOREIGN_ERRORS as exc:
            if self._raised(
                result,
                probe.name,
                exc,
                f"the port raised on one item alone: {one_line(exc)}",
            ):
                result.runs += 1
            return
        check_cache(result, probe.name, probe.items, actual, among)
        check_company_hash(result, probe.name, probe.items, actual, alone, beyond)

    def _port_among_copies(self, probe: Probe, item, setting: Setting | None):
        """The port on as many copies of ``item`` as the probe holds of its modality."""
        held = len(probe.of(item.modality))
        placeholder = self.hf.modalities[item.modality].placeholder or ""
        return self.port(placeholder * held, [item] * held, setting)

    def finish(self, checks: dict[str, CheckResult]) -> None:
        """Name what was not compared, and fail closed: a check that compared nothing fails."""
        notes = [
            f"{modality} not judged: {reason}"
            for modality, reason in self.hf.refused.items()
        ]
        notes += [
            f"{modality} not judged: the port declares it unsupported (a limit of 0, or none), so vLLM refuses such requests loudly"
            for modality in self.unsupported
        ]
        notes += [self.tokenizing_note] if self.tokenizing_note else []
        notes += [
            f"probes carry one {modality} each: HF takes no more in one prompt (the limits check judges the port's)"
            for modality, limit in self._hf_item_limits.items()
            if limit == 1
        ]
        if self.rejected:
            notes.append(
                f"HF rejects {len(self.rejected)} probe(s): " + "; ".join(self.rejected)
            )
        if self.refused_settings:
            refused = "; ".join(
                f"{name} ({said})" for name, said in self.refused_settings.items()
            )
            notes.append(
                f"the port refuses requests with these settings, so they were not compared: {refused}"
            )
        notes += [company_note(m, limit) for m, limit in self.company.items()]
        if self.outside_contract:
            notes.append(
                "not compared as HF answers them, vLLM cannot hold them: "
                + "; ".join(self.outside_contract)
            )
        checks["tokens"].summary = " | ".join(
            filter(None, [*notes, checks["tokens"].summary])
        )
        checks["tokens"].unjudged.extend(self.hf_unjudged)
        self._fail_closed(checks)
        self._stamp_settings(checks)

    def _fail_closed(self, checks: dict[str, CheckResult]) -> None:
        """Fail what compared too little: too few probes, a modality never compared, a check that compared nothing."""
        # Under the defaults only: a drawn setting HF cannot batch several items under
        # (ragged sizes) is HF's limit, listed with the rejected probes; a pinned one
        # nothing could be compared under is refused before this (verify_port).
        tally = self.defaults
        if tally["media"] and 2 * tally["compared"] < tally["media"]:
            message = (
                f"only {tally['compared']} of {tally['media']} probes with items could be compared "
                "(see the rejected probes); a reference that rejects most probes cannot pass a port"
            )
            # Enough probes were kept from comparison by what the snapshot lacks: not HF's fault, nor the port's.
            explained = (
                2 * (tally["compared"] + tally.get("lacking", 0)) >= tally["media"]
            )
            if not (explained and self.hf_unjudged):
                checks["tokens"].failures.append(
                    Failure("probes", message, loudness="unknown")
                )
        for modality, drawn in self.drawn.items():
            if not self.judged.get(modality):
                message = (
                    f"none of the {drawn} {modality} item(s) drawn could be compared (see the rejected and unholdable "
                    f"probes); a port cannot pass on a modality HF was never compared on"
                )
                self._gate(
                    checks["placeholders"],
                    Failure(
                        "probes", message, loudness="unknown", modalities=(modality,)
                    ),
                )
        for name, check in checks.items():
            if (
                name in NEEDS
                and check.runs == 0
                and not (check.failures or check.unjudged or check.skipped)
            ):
                self._gate(
                    check,
                    Failure(
                        name,
                        f"compared nothing: {NEEDS[name]} reached this check",
                        loudness="unknown",
                    ),
                )

    def _stamp_settings(self, checks: dict[str, CheckResult]) -> None:
        """Name on each failure the request settings its probe ran under (None: the defaults)."""
        for check in checks.values():
            check.failures = [
                dataclasses.replace(f, setting=self.settings_of[f.probe])
                if f.probe in self.settings_of
                else f
                for f in check.failures
            ]

    def check_dummy(self, result: CheckResult) -> None:
        """Per modality: the port's dummy inputs reach the largest count HF produced."""
        for modality in self.hf.modalities:
            if modality in self.limits:
                self._check_dummy(result, modality)

    def _check_dummy(self, result: CheckResult, modality: str) -> None:
        limit = self.limits.get(modality)
        wanted = min(DUMMY_ITEMS, limit) if limit is not None else DUMMY_ITEMS
        result.runs += 1
        try:
            text, data = self.runner.dummy(DUMMY_SEQ_LEN, {modality: wanted})
            output = self.runner.dummy_output(DUMMY_SEQ_LEN, {modality: wanted})
        except FOREIGN_ERRORS as exc:
            self._raised(
                result,
                "dummy",
                exc,
                f"the port's dummy {modality} inputs fail: {one_line(exc)}",
                modalities=(modality,),
            )
            return
        given = data.get(modality, [])
        if len(given) != wanted:
            result.failures.append(
                Failure(
                    "dummy",
                    f"dummy {modality} count for mm_counts",
                    None,
                    str(wanted),
                    str(len(given)),
                    loudness="loud",
                    modalities=(modality,),
                )
            )
            return
        embeds = [ph.num_embeds for ph in output.placeholders.get(modality, [])]
        largest = self.max_count.get(modality, 0)
        if min(embeds, default=0) < largest and _only_longer(
            self.largest_item[modality], given[0], self.hf.sampling_rate
        ):
            self._note_length_cap(
                result, self.largest_item[modality], largest, min(embeds), given[0]
            )
        elif min(embeds, default=0) < largest:
            message = f"dummy {modality} placeholders are below the largest count seen over the probes (worst case)"
            result.failures.append(
                Failure(
                    "dummy",
                    message,
                    None,
                    str(largest),
                    str(min(embeds, default=0)),
                    loudness="loud",
                    modalities=(modality,),
                )
            )
            return
        if modality == "image":
            self._check_dummy_against_hf(result, text, given, embeds)
        else:
            self._check_dummy_is_largest(
                result, modality, given[0], min(embeds), wanted
            )

    def _check_dummy_is_largest(
        self, result: CheckResult, modality: str, dummy, embeds: int, wanted: int
    ) -> None:
        """No larger item (twice the frames, twice the frame sides, twice the length) gets more positions from HF.

        Within the profiling budget and the contract's bounds (videos of up to
        :data:`WORST_CASE_FRAMES` frames of up to :data:`WORST_CASE_SIDE` px,
        audio of up to :data:`WORST_CASE_SECONDS`): a dummy below a neighbour
        of its own is not the worst case, whatever the probes reached.
        """
        for item in _larger_than(dummy, modality, self.hf.sampling_rate):
            try:
                count = self.hf.item_count(item)
            except FOREIGN_ERRORS:
                continue  # HF refuses so large an item: it is no case to hold
            if count > embeds and count * wanted <= DUMMY_SEQ_LEN:
                if _only_longer(item, dummy, self.hf.sampling_rate):
                    self._note_length_cap(result, item, count, embeds, dummy)
                    continue
                message = f"HF gives {item.describe()} more positions than the port's dummy {modality} (not the worst case)"
                result.failures.append(
                    Failure(
                        "dummy",
                        message,
                        None,
                        str(count),
                        str(embeds),
                        loudness="loud",
                        modalities=(modality,),
                    )
                )
                return

    def _note_length_cap(
        self, result: CheckResult, item: Item, count: int, embeds: int, dummy
    ) -> None:
        """A dummy video with fewer frames, or a dummy audio shorter, than HF takes: the port's profile, not a miscount.

        vLLM's contract lets a port bound the length it profiles (its own
        Qwen2-VL profiles at most 14 frames per video, its audio ports one
        feature-extractor window): a dummy video's frame size must be the
        worst case, its length is the port's choice. vLLM refuses an item
        larger than its encoder cache loudly; the bound is worth knowing, so
        it is noted in the summary, not failed.
        """
        if item.modality in self._length_noted:
            return  # one note per modality: the first longer item HF counts higher says it
        self._length_noted.add(item.modality)
        length = (
            f"videos of {_video_geometry(dummy)[0]} frames"
            if item.modality == "video"
            else f"audio of {_audio_seconds(dummy, self.hf.sampling_rate):.1f} s"
        )
        note = (
            f"the port profiles {length} ({embeds} positions); HF gives {item.describe()} "
            f"{count}: longer ones run beyond the port's profile (vLLM refuses one over its encoder cache, loudly)"
        )
        result.summary = "; ".join(filter(None, [result.summary, note]))

    def _check_dummy_against_hf(
        self, result: CheckResult, text: str, images: list, embeds: list[int]
    ) -> None:
        try:
            self.hf.run(text, images)
        except FOREIGN_ERRORS as exc:
            # The port's dummy text may name a token mmport's invented tokenizer has
            # under another name: HF finds no placeholder, a checkpoint's would.
            unheld = unheld_token_texts(text, self.facts)
            self._raised(
                result,
                "dummy",
                exc,
                f"HF rejects the port's dummy text and images: {one_line(exc)}",
                side="hf",
                modalities=("image",),
                lacking=Lacking("vocabulary", unheld[0]) if unheld else None,
            )
            return
        # What vLLM must give: each item as HF counts it alone (the same as HF's count
        # for the whole prompt, unless HF counts an item differently in company).
        alone = sum(self.hf.item_count(image) for image in images)
        if alone != sum(embeds):
            message = "embedding positions for the dummy inputs"
            result.failures.append(
                Failure(
                    "dummy",
                    message,
                    None,
                    str(alone),
                    str(sum(embeds)),
                    loudness="loud",
                    modalities=("image",),
                )
            )

    def check_limits(self, result: CheckResult) -> None:
        """The port declares every modality HF handles, and HF accepts as many items as each limit allows."""
        result.runs += 1
        if self.limits_raised is not None:  # set with limits_error, by _port_limits
            self._raised(result, "limits", self.limits_raised, self.limits_error)
            return
        missing = [
            m
            for m in self.hf.modalities
            if m not in self.limits and m not in self.unsupported
        ]
        if missing:
            result.failures.append(
                Failure(
                    "limits",
                    f"HF handles {', '.join(missing)} but the port declares no limit for it",
                    loudness="loud",
                    modalities=tuple(missing),
                )
            )
        for modality in self.hf.modalities:
            if modality in self.limits:
                self._check_limit(result, modality, self.limits[modality])

    def _limit_items(self, modality: str, count: int) -> list[Item]:
        small = {
            "image": Item("image", (32, 32)),
            "video": Item("video", (32, 32), frames=2, fps=2.0),
            "audio": Item("audio", seconds=0.5),
        }
        return [
            Item(
                modality,
                small[modality].size,
                small[modality].frames,
                small[modality].fps,
                small[modality].seconds,
                seed=i,
            )
            for i in range(count)
        ]

    def _check_limit(
        self, result: CheckResult, modality: str, limit: int | None
    ) -> None:
        count = limit if limit is not None else UNLIMITED_PROBE
        items = self._limit_items(modality, count)
        placeholder = self.hf.modalities[modality].placeholder or ""
        allowed = "any number of" if limit is None else limit
        try:
            output = self.hf.run(placeholder * count + " limits", items)
        except FOREIGN_ERRORS as exc:
            self._beyond_hf(result, modality, allowed, items, placeholder, exc)
            return
        prompt = output.prompt
        if count > 1 and self._expands_as_one(output, items):
            # BLIP-2's processor takes more images but writes one block for them all.
            message = f"the port allows {allowed} {modality}s but HF gives {count} of them the embedding positions of one"
            result.failures.append(
                Failure("limits", message, loudness="loud", modalities=(modality,))
            )
            return
        try:
            self.port(prompt, items)
        except FOREIGN_ERRORS as exc:
            self._raised(
                result,
                "limits",
                exc,
                f"the port rejects {count} {modality}s within its own limit: {one_line(exc)}",
                modalities=(modality,),
            )
            return
        if limit is not None:
            self._check_limit_is_needed(result, modality, limit)

    def _beyond_hf(
        self,
        result: CheckResult,
        modality: str,
        allowed: int | str,
        items: list[Item],
        placeholder: str,
        hf_raised: Exception,
    ) -> None:
        """HF rejects as many items as the port allows: a failure only where the port cannot take them either.

        A port may take more items than HF's processor does in one call (vLLM's
        Qwen3-ASR runs HF once per audio); there is nothing to compare it with
        beyond HF's limit, so that is noted. A port that passes them to HF
        whole raises as HF does: vLLM fails such requests, loudly.
        """
        count = len(items)
        hf_words = f"HF rejects {count}: {one_line(hf_raised)}"
        if self.cannot_judge(result, "limits", hf_raised, "hf"):
            return
        if self.hf.writes_own_prompt:
            # Such a processor makes each item a sample of its own: the model takes one per sequence.
            message = f"the port allows {allowed} {modality}s but {hf_words}"
            result.failures.append(
                Failure("limits", message, loudness="loud", modalities=(modality,))
            )
            return
        try:
            answer = self.port(placeholder * count + " limits", items)
        except FOREIGN_ERRORS as exc:
            message = f"the port allows {allowed} {modality}s but raises on {count} ({one_line(exc)}); {hf_words}"
            result.failures.append(
                Failure("limits", message, loudness="loud", modalities=(modality,))
            )
            return
        held = [ph.num_embeds for ph in answer.placeholders.get(modality, [])]
        alone = [self.hf.item_count(item) for item in items]
        if held != alone:
            message = f"the port takes {count} {modality}s in one prompt where {hf_words}, and gives them {held} positions where HF gives each alone {alone}"
            result.failures.append(
                Failure(
                    "limits",
                    message,
                    None,
                    str(alone),
                    str(held),
                    loudness="silent",
                    modalities=(modality,),
                )
            )
            return
        note = f"the port takes {count} {modality}s in one prompt, each as HF counts it alone, where {hf_words}; not compared beyond HF's limit"
        result.summary = "; ".join(filter(None, [result.summary, note]))

    def _expands_as_one(self, output: HFOutput, items: list[Item]) -> bool:
        """True when HF's prompt for these like items holds no more embedding positions than one of them alone."""
        embed_id = self.hf.modalities[items[0].modality].embed_id
        one = self.hf.item_count(items[0])
        return (
            0
            < output.input_ids.count(embed_id)
            <= one
            < sum(self.hf.item_count(item) for item in items)
        )

    def _check_limit_is_needed(
        self, result: CheckResult, modality: str, limit: int
    ) -> None:
        """Say so when HF expands one more item than the port's limit: a restriction, not a disagreement.

        vLLM's contract makes ``get_supported_mm_limits`` the port's own
        declaration: a request over it is refused loudly ("At most 1 video(s)
        may be provided"), never served wrong, and vLLM's own ports set lower
        limits than HF's processors on purpose (one video for GLM-4.1V). The
        check notes it (docs/vllm.md); a limit HF cannot honour fails above.
        A processor that takes more images but gives them no more embedding
        positions (BLIP-2's one block per prompt) does not support them.
        """
        items = self._limit_items(modality, limit + 1)
        ref = self.hf.modalities[modality]
        try:
            ids = self.hf.run((ref.placeholder or "") * len(items), items).input_ids
        except FOREIGN_ERRORS:
            return  # HF rejects them too: the limit holds
        expanded = sum(self.hf.item_count(item) for item in items)
        if ids.count(ref.embed_id) == expanded:
            note = f"the port allows {limit} {modality}(s) where HF expands {limit + 1} (vLLM refuses more, loudly)"
            result.summary = "; ".join(filter(None, [result.summary, note]))
