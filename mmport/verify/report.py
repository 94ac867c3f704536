"""Check results, the verify report, and its JSON and JUnit forms."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from xml.etree import ElementTree as ET

__all__ = ["CHECKS", "CheckResult", "CountCurve", "CurvePoint", "Failure", "ItemSize", "Report", "TokenWindow"]

# The parity contract, in the order checks are reported (DESIGN §4).
CHECKS = ("tokens", "placeholders", "fields", "cache", "embeds", "dummy", "limits", "model", "serve")


@dataclass(frozen=True)
class Failure:
    """One disagreement: where (probe, position) and both values."""

    probe: str
    message: str
    position: int | None = None
    expected: str | None = None
    actual: str | None = None

    def describe(self) -> str:
        """A one-paragraph human description of the failure."""
        text = f"[{self.probe}] {self.message}"
        if self.position is not None:
            text += f" at position {self.position}"
        if self.expected is not None or self.actual is not None:
            text += f": HF {self.expected}, port {self.actual}"
        return text


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
        return cls(item.modality, width, height, item.frames, item.fps, item.seconds, item.describe())


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

    @property
    def status(self) -> str:
        """``pass``, ``fail`` or ``skip``."""
        if self.failures:
            return "fail"
        return "pass" if self.runs else "skip"


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
    # Per probe whose tokens differ: both sides around the first difference.
    token_windows: dict[str, TokenWindow] = field(default_factory=dict)
    # Per probe, its items' sizes, in order.
    probe_items: dict[str, list[ItemSize]] = field(default_factory=dict)
    # Per modality, counts over a sweep of item sizes (only when verify was asked for them).
    curves: dict[str, CountCurve] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return all(c.status != "fail" for c in self.checks.values())

    def failed_modalities(self) -> set[str]:
        """The modalities some failure concerns: its probe's items, or the modality it names."""
        from mmport.media import MODALITIES

        every = {m for ms in self.probe_modalities.values() for m in ms}
        failed: set[str] = set()
        for check in self.checks.values():
            for failure in check.failures:
                named = {m for m in MODALITIES if m in failure.message}
                failed |= set(self.probe_modalities.get(failure.probe, ())) or named or every
        return failed

    def failure_summary(self) -> str:
        """Every failure, one per line (for assertion messages)."""
        lines = [f"{c.name}: {f.describe()}" for c in self.checks.values() for f in c.failures]
        return "\n".join(lines) or "all checks passed"

    def to_json(self) -> str:
        """The report as JSON (stable keys, for CI)."""
        data = {
            "ref": self.ref,
            "port": self.port,
            "backend": self.backend,
            "probes": self.probes,
            "seed": self.seed,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "probe_cases": self.probe_cases,
            "probe_modalities": self.probe_modalities,
            "settings": [{"modality": m, "kwargs": k, "origin": o} for m, k, o in self.settings],
            "token_windows": {probe: asdict(w) for probe, w in self.token_windows.items()},
            "probe_items": {probe: [asdict(i) for i in items] for probe, items in self.probe_items.items()},
            "curves": {modality: asdict(c) for modality, c in self.curves.items()},
            "checks": {
                name: {
                    "status": c.status,
                    "runs": c.runs,
                    "skipped": c.skipped,
                    "summary": c.summary,
                    "metrics": c.metrics,
                    "failures": [asdict(f) for f in c.failures],
                }
                for name, c in self.checks.items()
            },
        }
        return json.dumps(data, indent=2)

    def to_junit(self) -> str:
        """The report as JUnit XML: one testcase per check."""
        failed = sum(c.status == "fail" for c in self.checks.values())
        skipped = sum(c.status == "skip" for c in self.checks.values())
        suite = ET.Element(
            "testsuite",
            name=f"mmport verify {self.ref}",
            tests=str(len(self.checks)),
            failures=str(failed),
            skipped=str(skipped),
            time=f"{self.seconds:.3f}",
        )
        for c in self.checks.values():
            case = ET.SubElement(suite, "testcase", classname=f"mmport.verify.{self.ref}", name=c.name)
            # How many comparisons the check made: a pass over none is no pass.
            ET.SubElement(ET.SubElement(case, "properties"), "property", name="runs", value=str(c.runs))
            if c.status == "fail":
                node = ET.SubElement(case, "failure", message=c.failures[0].describe())
                node.text = "\n".join(f.describe() for f in c.failures)
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=c.skipped or "no probe exercised this check")
        return ET.tostring(suite, encoding="unicode", xml_declaration=True)
