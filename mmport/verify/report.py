"""Check results, the verify report, and its JSON and JUnit forms."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal
from xml.etree import ElementTree as ET

__all__ = [
    "CHECKS",
    "CannotJudge",
    "CheckResult",
    "CountCurve",
    "CurvePoint",
    "Failure",
    "ItemSize",
    "Lacking",
    "Loudness",
    "Report",
    "SettingFit",
    "Status",
    "TokenWindow",
    "Verdict",
]

# The parity contract, in the order checks are reported (DESIGN §4).
CHECKS = (
    "tokens",
    "placeholders",
    "fields",
    "cache",
    "embeds",
    "dummy",
    "limits",
    "model",
    "serve",
)

# How a failure shows to a vLLM user: ``loud`` when vLLM (or the port) raises an
# error the user sees; ``silent`` when vLLM serves a wrong answer (token ids,
# counts, fields, embeddings) without a word; ``unknown`` for the gate's own
# failures (a check that compared nothing says nothing of how vLLM would behave).
Loudness = Literal["loud", "silent", "unknown"]
# A check's status, and a report's verdict (DESIGN §4: pass, fail, cannot judge).
Status = Literal["pass", "fail", "cannot_judge", "skip"]
Verdict = Literal["pass", "fail", "cannot_judge"]


@dataclass(frozen=True)
class Failure:
    """One disagreement: where (probe, position), both values, and how bad it is for a user.

    ``loudness`` says whether vLLM would fail loudly or silently; ``setting``
    names the request settings (``mm_processor_kwargs``) the probe ran under,
    None under the processor's defaults::

        Failure("probe1", "token ids differ", 5, "32000", "90", loudness="silent")
    """

    probe: str
    message: str
    position: int | None = None
    expected: str | None = None
    actual: str | None = None
    loudness: Loudness = field(kw_only=True)
    setting: str | None = field(default=None, kw_only=True)
    # What a failure concerns when its probe holds no items of its own (the dummy
    # inputs, the limits, a modality never compared); empty: every modality.
    modalities: tuple[str, ...] = field(default=(), kw_only=True)

    @property
    def occurs(self) -> Literal["defaults", "setting"]:
        """``defaults`` when the failure happens under the processor's defaults, ``setting`` when only under a request's."""
        return "defaults" if self.setting is None else "setting"

    def severity(self) -> str:
        """How bad it is, in words: ``silent, under the defaults`` or ``loud, only under max_pixels=3136``."""
        when = (
            "under the defaults"
            if self.setting is None
            else f"only under {self.setting}"
        )
        return f"{self.loudness}, {when}"

    def describe(self, severity: bool = True) -> str:
        """A one-paragraph human description of the failure, its severity last (unless ``severity`` is False)."""
        text = f"[{self.probe}] {self.message}"
        if self.position is not None:
            text += f" at position {self.position}"
        if self.expected is not None or self.actual is not None:
            text += f": HF {self.expected}, port {self.actual}"
        return f"{text} ({self.severity()})" if severity else text

    def to_dict(self) -> dict:
        """The failure as JSON-ready data: its fields and ``occurs``."""
        return {**asdict(self), "occurs": self.occurs}


@dataclass(frozen=True)
class Lacking:
    """What a snapshot lacks that real checkpoints of its family carry (:mod:`mmport.verify.lacking` finds it).

    ``Lacking("vocabulary", "\\n\\n\\n")`` is a token text its tokenizer's vocabulary
    has no entry for; ``Lacking("config", "Gemma3Config.boi_token_index")`` a config
    attribute it does not set (or sets to None where a sub-config belongs).
    """

    kind: Literal["vocabulary", "config"]
    name: str

    def describe(self) -> str:
        """``the snapshot lacks the vocabulary entry '\\n\\n\\n'``, or ``... the config attribute X.y``."""
        if self.kind == "vocabulary":
            return f"the snapshot lacks the vocabulary entry {self.name!r}"
        return f"the snapshot lacks the config attribute {self.name}"


@dataclass(frozen=True)
class CannotJudge:
    """A probe no verdict can be drawn from: a side raised because the snapshot lacks something.

    ``side`` is who raised (``port`` or ``hf``), ``error`` the exception in one line.
    """

    probe: str
    lacking: Lacking
    side: Literal["port", "hf"]
    error: str

    def describe(self) -> str:
        """``[probe1] cannot judge: the snapshot lacks ... (the port raised KeyError: '\\n\\n\\n')``."""
        who = "the port" if self.side == "port" else "HF"
        return f"[{self.probe}] cannot judge: {self.lacking.describe()} ({who} raised {self.error})"


@dataclass(frozen=True)
class TokenWindow:
    """HF's and the port's token ids around their first difference (``position``), both from ``start``.

    ``hf_tokens``/``port_tokens`` are the same ids as HF's tokenizer spells
    them (empty when it could not): ``TokenWindow(587, 575, (32000, 90), (32000, 32000), ...)``.
    """

    position: int
    start: int
    hf: tuple[int, ...]
    port: tuple[int, ...]
    hf_tokens: tuple[str, ...] = ()
    port_tokens: tuple[str, ...] = ()


@dataclass(frozen=True)
class SettingFit:
    """Whether the HF model takes what HF's processor gives under one request setting (:mod:`mmport.verify.fit`).

    ``SettingFit("image", "do_center_crop=false", "not applicable", "HF's processor gives ...", "tower input size",
    "a 1600×1200 image")``: no engine serves such a request, so the port is not judged under it.
    ``undecided`` settings are judged, and ``reason`` says why their fit could not be told.
    """

    modality: str
    setting: str  # described: ``do_center_crop=false``
    verdict: Literal["applicable", "not applicable", "undecided"]
    reason: str = ""  # why not (HF's model error, or the static fact with its source), or why undecided
    basis: str = ""  # how it was decided: "tower input size", or the model that ran
    item: str = ""  # the item it was decided on, described


@dataclass(frozen=True)
class ItemSize:
    """What decides one probe item's count, as numbers: ``(width, height)``, frames and rate, or seconds."""

    modality: str
    width: int = 0
    height: int = 0
    frames: int = 0
    fps: float = 0.0
    seconds: float = 0.0
    described: str = ""  # ``a 333×517 image``

    @classmethod
    def of(cls, item) -> ItemSize:
        """The sizes of a probe :class:`~mmport.verify.probes.Item`."""
        width, height = item.size
        return cls(
            item.modality,
            width,
            height,
            item.frames,
            item.fps,
            item.seconds,
            item.describe(),
        )


@dataclass(frozen=True)
class CurvePoint:
    """HF's and the port's count for one item alone; ``port`` is None where the port raised (``error``)."""

    group: str  # the panel the point is drawn in: an aspect ratio, a frame size
    item: str  # the item, described
    x: float
    hf: int
    port: int | None
    error: str = ""


@dataclass(frozen=True)
class CountCurve:
    """One modality's counts over a sweep of item sizes (:mod:`mmport.verify.curves`)."""

    modality: str
    x_label: str
    log_x: bool
    points: tuple[CurvePoint, ...]

    def mismatches(self) -> list[CurvePoint]:
        """The points where the port's count is not HF's."""
        return [p for p in self.points if p.port != p.hf]


@dataclass
class CheckResult:
    """The outcome of one named check over all probes."""

    name: str
    runs: int = 0
    failures: list[Failure] = field(default_factory=list)
    skipped: str = ""
    summary: str = ""  # what a passing run measured, in words
    metrics: dict[str, float] = field(default_factory=dict)
    # Probes that could not be judged: the snapshot lacks what the port or HF needs.
    unjudged: list[CannotJudge] = field(default_factory=list)

    @property
    def status(self) -> Status:
        """``fail`` on any failure; else ``cannot_judge`` on any unjudged probe; else ``pass`` (or ``skip`` if nothing ran)."""
        if self.failures:
            return "fail"
        if self.unjudged:
            return "cannot_judge"
        return "pass" if self.runs else "skip"

    def detail(self) -> str:
        """The row's one line: the first failure, the first reason it cannot judge, why skipped, or what it measured."""
        if self.failures:
            return self.failures[0].describe()
        if self.unjudged:
            return self.unjudged[0].describe()
        return self.skipped or self.summary


@dataclass
class Report:
    """Everything verify found, plus how it ran."""

    ref: str
    port: str
    backend: str
    probes: int
    seed: int
    checks: dict[str, CheckResult]
    seconds: float = 0.0
    probe_cases: dict[str, str] = field(default_factory=dict)
    # Per probe, the modalities of its items, in order.
    probe_modalities: dict[str, list[str]] = field(default_factory=dict)
    # The request settings probes also ran under: (modality or "", "name=value, ...", "drawn" or "pinned").
    settings: list[tuple[str, str, str]] = field(default_factory=list)
    # Whether settings were looked for at all (``--settings 0`` asks for none).
    settings_sought: bool = True
    # Settings HF's model cannot take (not judged), and those whose fit could not be told (judged).
    settings_not_applicable: list[SettingFit] = field(default_factory=list)
    settings_undecided: list[SettingFit] = field(default_factory=list)
    # Per probe whose tokens differ: both sides around the first difference.
    token_windows: dict[str, TokenWindow] = field(default_factory=dict)
    # Per probe, its items' sizes, in order.
    probe_items: dict[str, list[ItemSize]] = field(default_factory=dict)
    # Per modality, counts over a sweep of item sizes (only when verify was asked for them).
    curves: dict[str, CountCurve] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        """``fail`` if any check failed; else ``cannot_judge`` if any check cannot judge; else ``pass``."""
        statuses = {c.status for c in self.checks.values()}
        if "fail" in statuses:
            return "fail"
        return "cannot_judge" if "cannot_judge" in statuses else "pass"

    @property
    def passed(self) -> bool:
        """True when the verdict is pass: a port that could not be judged has not passed."""
        return self.verdict == "pass"

    def failed_modalities(self) -> set[str]:
        """The modalities some failure concerns: its probe's items, else the modalities it names, else every one."""
        every = {m for ms in self.probe_modalities.values() for m in ms}
        failed: set[str] = set()
        for check in self.checks.values():
            for failure in check.failures:
                failed |= (
                    set(self.probe_modalities.get(failure.probe, ()))
                    or set(failure.modalities)
                    or every
                )
        return failed

    def failure_summary(self) -> str:
        """Every failure and every probe that could not be judged, one per line (for assertion messages)."""
        lines = [
            f"{c.name}: {f.describe()}"
            for c in self.checks.values()
            for f in c.failures
        ]
        lines += [
            f"{c.name}: {u.describe()}"
            for c in self.checks.values()
            for u in c.unjudged
        ]
        return "\n".join(lines) or "all checks passed"

    def to_json(self) -> str:
        """The report as JSON (stable keys, for CI)."""
        data = {
            "ref": self.ref,
            "port": self.port,
            "backend": self.backend,
            "probes": self.probes,
            "seed": self.seed,
            "verdict": self.verdict,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "probe_cases": self.probe_cases,
            "probe_modalities": self.probe_modalities,
            "settings": [
                {"modality": m, "kwargs": k, "origin": o} for m, k, o in self.settings
            ],
            "settings_not_applicable": [
                _fit_json(f) for f in self.settings_not_applicable
            ],
            "settings_undecided": [_fit_json(f) for f in self.settings_undecided],
            "token_windows": {
                probe: asdict(w) for probe, w in self.token_windows.items()
            },
            "probe_items": {
                probe: [asdict(i) for i in items]
                for probe, items in self.probe_items.items()
            },
            "curves": {modality: asdict(c) for modality, c in self.curves.items()},
            "checks": {
                name: {
                    "status": c.status,
                    "runs": c.runs,
                    "skipped": c.skipped,
                    "summary": c.summary,
                    "metrics": c.metrics,
                    "failures": [f.to_dict() for f in c.failures],
                    "cannot_judge": [asdict(u) for u in c.unjudged],
                }
                for name, c in self.checks.items()
            },
        }
        return json.dumps(data, indent=2)

    def to_junit(self) -> str:
        """The report as JUnit XML: one testcase per check."""
        failed = sum(c.status == "fail" for c in self.checks.values())
        # A check that cannot judge is a skipped case: neither a pass CI counts silently nor a failure of the port.
        skipped = sum(
            c.status in ("skip", "cannot_judge") for c in self.checks.values()
        )
        suite = ET.Element(
            "testsuite",
            name=f"mmport verify {self.ref}",
            tests=str(len(self.checks)),
            failures=str(failed),
            skipped=str(skipped),
            time=f"{self.seconds:.3f}",
        )
        ET.SubElement(
            ET.SubElement(suite, "properties"),
            "property",
            name="verdict",
            value=self.verdict,
        )
        for c in self.checks.values():
            _junit_case(suite, self.ref, c)
        return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def _junit_case(suite: ET.Element, ref: str, c: CheckResult) -> None:
    """One check as a ``<testcase>``: its runs and status as properties, then its failure or skip."""
    case = ET.SubElement(
        suite, "testcase", classname=f"mmport.verify.{ref}", name=c.name
    )
    properties = ET.SubElement(case, "properties")
    # How many comparisons the check made: a pass over none is no pass.
    ET.SubElement(properties, "property", name="runs", value=str(c.runs))
    ET.SubElement(properties, "property", name="verdict", value=c.status)
    if c.status == "fail":
        node = ET.SubElement(case, "failure", message=c.failures[0].describe())
        node.text = "\n".join(f.describe() for f in c.failures)
    elif c.status == "cannot_judge":
        reason = c.unjudged[0]
        node = ET.SubElement(
            case, "skipped", message=f"cannot judge: {reason.lacking.describe()}"
        )
        node.text = "\n".join(u.describe() for u in c.unjudged)
    elif c.status == "skip":
        ET.SubElement(
            case, "skipped", message=c.skipped or "no probe exercised this check"
        )


def _fit_json(fit: SettingFit) -> dict[str, str]:
    """A setting's fit in the report's JSON: ``kwargs`` named as ``settings`` names them."""
    return {
        "modality": fit.modality,
        "kwargs": fit.setting,
        "reason": fit.reason,
        "basis": fit.basis,
        "item": fit.item,
    }
