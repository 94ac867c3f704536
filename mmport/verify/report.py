"""Check results, the verify report, and its JSON and JUnit forms."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from xml.etree import ElementTree as ET

__all__ = ["CHECKS", "CheckResult", "Failure", "Report"]

# The parity contract, in the order checks are reported (DESIGN §4).
CHECKS = ("tokens", "placeholders", "fields", "cache", "embeds", "dummy", "limits", "model")


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
