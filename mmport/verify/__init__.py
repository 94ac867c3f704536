"""``mmport verify``: run any port against the HF reference (DESIGN §4).

verify never reads a PortSpec: the port is a black box loaded from a file and
run through vLLM (or the bundled runtime); HF's processor is the reference.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mmport.errors import MmportError, PortLoadError
from mmport.media import MODALITIES
from mmport.runtime.hf_model import ModelOptions
from mmport.serve import ServeOptions
from mmport.verify.report import CHECKS, CheckResult, Failure, ItemSize, Report
from mmport.verify.settings import SETTINGS_PER_MODALITY, Setting

if TYPE_CHECKING:
    from mmport.runtime.backends import Backend, PortClasses
    from mmport.sources.snapshot import Snapshot
    from mmport.verify.fit import FitJudge
    from mmport.verify.model_check import ModelCheck
    from mmport.verify.probes import Probe
    from mmport.verify.reference import HFReference
    from mmport.verify.session import Session

__all__ = [
    "CheckResult",
    "Failure",
    "ModelOptions",
    "Report",
    "ServeOptions",
    "verify_port",
]

# ``--port vllm``: the processor vLLM itself registers for the snapshot's architecture.
VLLM_PORT = "vllm"

# Probes run under each non-default setting (items of the setting's modality).
SETTING_PROBES = 3


def verify_port(
    ref: str,
    port_path: Path,
    *,
    probes: int = 8,
    seed: int = 0,
    backend: str = "auto",
    progress: Callable[[str], None] | None = None,
    model: ModelOptions | None = None,
    processor_kwargs: dict | None = None,
    settings_per_modality: int = SETTINGS_PER_MODALITY,
    curves: bool = False,
    trust_remote_code: bool = False,
    serve: ServeOptions | None = None,
    processor_code: Path | None = None,
) -> Report:
    """Verify the port in ``port_path`` against the HF processor of ``ref``.

    With ``model``, the HF model itself checks the port too (the ``model`` check).
    Probes run under the processor's defaults, then under settings that change
    HF's counts (drawn from HF, see :mod:`mmport.verify.settings`), or under
    ``processor_kwargs`` when given: a request's ``mm_processor_kwargs``.
    With ``curves``, HF's and the port's counts over a sweep of item sizes
    are recorded too (:mod:`mmport.verify.curves`, for the HTML report).
    ``trust_remote_code`` lets the snapshot's own code run (HF's and the port's processor),
    and ``processor_code``'s: a directory or package holding the processor class
    when the snapshot does not ship it (:mod:`mmport.sources.processor_code`).
    With ``serve``, the port's model class serves a tiny twin checkpoint in a real
    vLLM engine and must give HF's greedy tokens (the ``serve`` check, :mod:`mmport.serve`).
    """
    from mmport.hf.quiet import quiet_transformers
    from mmport.runtime.backends import select_backend

    started = time.perf_counter()
    notify = progress or (lambda message: None)
    # Bad model options fail before any slow work.
    target = model.placement() if model else None
    with quiet_transformers():
        notify(f"resolving {ref}")
        snapshot = _resolved(ref, model, serve, trust_remote_code, processor_code)
        chosen = select_backend(backend)
        checks = {name: CheckResult(name) for name in CHECKS}
        port = _load_port(chosen, snapshot, port_path, notify)
        hf = _reference(snapshot, chosen, notify)
        if str(port_path) != VLLM_PORT:
            _check_generated_for(Path(port_path), snapshot)
        model_check = _model_check(hf, model, target, checks["model"], seed, notify)
        session = _session(hf, chosen, port, trust_remote_code, model_check, notify)
        probed = _run_probes(
            session,
            checks,
            probes,
            seed,
            processor_kwargs,
            settings_per_modality,
            notify,
        )
        _check_whole_port(session, checks, port_path, serve, seed, notify)
        swept = _count_curves(session, notify) if curves else {}
    report = Report(
        ref,
        str(port_path),
        chosen.name,
        probes,
        seed,
        checks,
        seconds=time.perf_counter() - started,
        token_windows=session.token_windows,
        curves=swept,
    )
    return probed.report(report)


@dataclasses.dataclass(frozen=True)
class _Probed:
    """What the probes ran under, for the report: the log, the request settings, and the judge of their fit."""

    log: ProbeLog
    settings: list[Setting]
    fits: FitJudge
    # Settings were asked for (``--processor-kwargs``) or drawn (a count per modality).
    sought: bool

    def report(self, report: Report) -> Report:
        """``report`` saying what the probes held and which settings they ran under."""
        return dataclasses.replace(
            report,
            probe_cases=self.log.cases,
            probe_modalities=self.log.modalities,
            probe_items=self.log.sizes,
            settings=[(s.modality, s.describe(), s.origin) for s in self.settings],
            settings_not_applicable=self.fits.not_applicable(),
            settings_undecided=self.fits.undecided(),
            settings_sought=self.sought,
        )


def _run_probes(
    session: Session,
    checks: dict[str, CheckResult],
    count: int,
    seed: int,
    processor_kwargs: dict | None,
    settings_per_modality: int,
    notify: Callable[[str], None],
) -> _Probed:
    """The probes under the processor's defaults, then under the request settings (the user's, or drawn from HF)."""
    from mmport.verify.fit import FitJudge

    log = ProbeLog()
    _run_default_probes(session, count, seed, checks, log, notify)
    model_check = session.model_check
    # One judge per run: the tiny twin it may build, and each setting's fit, are cached in it.
    fits = FitJudge(session.hf, model_check.model if model_check else None, seed=seed)
    settings = _request_settings(
        session.hf, fits, processor_kwargs, seed, settings_per_modality, notify
    )
    _run_setting_probes(session, settings, seed, checks, log, notify)
    if processor_kwargs:
        _refuse_unjudged_kwargs(session)
    sought = bool(processor_kwargs) or settings_per_modality > 0
    return _Probed(log, settings, fits, sought)


def _count_curves(session: Session, notify: Callable[[str], None]) -> dict:
    """HF's and the port's counts over a sweep of item sizes (``--html``'s curves)."""
    from mmport.verify.curves import count_curves

    notify("sweeping item sizes for the count curves")
    return count_curves(session)


def _load_port(
    chosen: Backend, snapshot: Snapshot, port_path: Path, notify: Callable[[str], None]
) -> PortClasses:
    """The port's classes: loaded from its file, or (``--port vllm``) the ones vLLM registers."""
    notify("loading the port")
    if str(port_path) == VLLM_PORT:
        return chosen.load_registered(snapshot.path)
    return chosen.load_port(Path(port_path))


# The header every generated file starts with (mmport.render), and the architecture its
# first lines name (the processing module's docstring, the model module's header).
_GENERATED = re.compile(r"Generated by mmport \S+ from `(?P<ref>[^`]+)`")
_ARCHITECTURE = re.compile(r"\b[A-Z]\w*For[A-Z]\w*\b")


def _check_generated_for(path: Path, snapshot: Snapshot) -> None:
    """A port mmport generated for another architecture than the snapshot's says so,
    once the snapshot is known to be a reference, before the port is asked to
    process anything for it."""
    try:
        head = " ".join(
            line.lstrip("# ").strip() for line in path.read_text().splitlines()[:5]
        )
    except (OSError, UnicodeDecodeError):
        return  # load_port says what is wrong with the file
    found = _GENERATED.search(head)
    written_for = set(_ARCHITECTURE.findall(head))
    named = getattr(snapshot.load_config(), "architectures", None) or []
    if found and written_for and named and not written_for & set(named):
        raise PortLoadError(
            f"{path} was generated for `{found['ref']}` ({', '.join(sorted(written_for))}), "
            f"and this snapshot is {', '.join(named)} ({snapshot.model_type}); scaffold "
            "a port of this snapshot, or pass the port written for it"
        )


def _reference(
    snapshot: Snapshot, chosen: Backend, notify: Callable[[str], None]
) -> HFReference:
    """The HF reference, learned from the snapshot once it is known to be one."""
    from mmport.sources.health import check_reference
    from mmport.verify.reference import HFReference

    notify("learning the HF reference")
    check_reference(snapshot)
    return HFReference(
        snapshot, chat_layouts=chosen.chat_placeholders(snapshot.path, MODALITIES)
    )


def _session(
    hf: HFReference,
    chosen: Backend,
    port: PortClasses,
    trust_remote_code: bool,
    model_check: ModelCheck | None,
    notify: Callable[[str], None],
) -> Session:
    """The port built on the snapshot, beside the HF reference (and HF's model, with ``--model``)."""
    from mmport.verify.session import Session

    notify("building the port")
    built = chosen.build(port, hf.snapshot.path, trust_remote_code=trust_remote_code)
    return Session(hf, built, model_check)


@dataclasses.dataclass
class ProbeLog:
    """What each probe held, by name, for the report: described in words, its items' modalities and sizes."""

    cases: dict[str, str] = dataclasses.field(default_factory=dict)
    modalities: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    sizes: dict[str, list[ItemSize]] = dataclasses.field(default_factory=dict)

    def record(
        self, probe: Probe, described: str, notify: Callable[[str], None]
    ) -> None:
        """Log ``probe`` under its name and say it is running."""
        self.modalities[probe.name] = [item.modality for item in probe.items]
        self.sizes[probe.name] = [ItemSize.of(item) for item in probe.items]
        self.cases[probe.name] = described
        notify(f"{probe.name}: {len(probe.items)} item(s)")


def _resolved(
    ref: str,
    model: ModelOptions | None,
    serve: ServeOptions | None,
    trust_remote_code: bool,
    processor_code: Path | None,
) -> Snapshot:
    """The snapshot ``ref`` names, with its weights where the model or serve checks need the checkpoint's own."""
    from mmport.runtime.hf_model import require_weights
    from mmport.sources import resolve

    own_weights = bool(model and model.weights) or bool(serve and serve.weights)
    snapshot = resolve(
        ref,
        weights=own_weights,
        trust_remote_code=trust_remote_code,
        processor_code=processor_code,
    )
    if serve and serve.weights:
        require_weights(snapshot)  # before any slow work
    return snapshot


def _model_check(
    hf: HFReference,
    model: ModelOptions | None,
    target,
    result: CheckResult,
    seed: int,
    notify: Callable[[str], None],
) -> ModelCheck | None:
    """The HF model checking the port alongside the processor (``--model``), or None with the check skipped."""
    from mmport.runtime.hf_model import load_model
    from mmport.verify.model_check import ModelCheck

    if model is None:
        result.skipped = "pass --model to check the port against the HF model"
        return None
    assert target is not None, "model.placement() ran first"
    notify(f"building the HF model on {target.device.type}…")
    hf_model = load_model(
        hf.snapshot, target, tiny=model.tiny, weights=model.weights, seed=seed
    )
    return ModelCheck(
        hf_model, {m: ref.embed_id for m, ref in hf.modalities.items()}, result
    )


def _run_default_probes(
    session: Session,
    count: int,
    seed: int,
    checks: dict[str, CheckResult],
    log: ProbeLog,
    notify: Callable[[str], None],
) -> None:
    """The seeded probes, under the processor's defaults."""
    from mmport.verify.probes import make_probes

    hf = session.hf
    written = (
        " (HF writes the request's prompt around it)" if hf.writes_own_prompt else ""
    )
    for probe in make_probes(
        count,
        seed,
        limits=session.probe_limits(),
        audio_seconds=hf.kept_audio_seconds(),
    ):
        described = ", ".join(item.describe() for item in probe.items) or "no items"
        log.record(
            probe,
            f"{described}; prompt {probe.prompt(hf.placeholders())!r}{written}",
            notify,
        )
        session.run_probe(probe, checks)


def _run_setting_probes(
    session: Session,
    settings: list[Setting],
    seed: int,
    checks: dict[str, CheckResult],
    log: ProbeLog,
    notify: Callable[[str], None],
) -> None:
    """A few probes under each request setting, each led by an item HF counts differently under it, so a port ignoring it shows."""
    from mmport.verify.probes import make_probes
    from mmport.verify.settings import telling_items

    hf = session.hf
    for setting in settings:
        if setting.modality in session.unsupported:
            continue  # the port declares the modality unsupported: nothing of it is probed
        limits = session.probe_limits()
        limits = (
            {setting.modality: limits[setting.modality]}
            if setting.modality in limits
            else limits
        )
        told = telling_items(hf, setting)
        if setting.origin == "pinned" and not told:
            session.outside_contract.append(
                f"HF counts no reference item differently under {setting.describe()}"
            )
        # The first carries that item alone: HF cannot batch items some settings leave ragged.
        for index, probe in enumerate(
            make_probes(
                SETTING_PROBES,
                seed + 1,
                limits=limits,
                audio_seconds=hf.kept_audio_seconds(),
            )
        ):
            if told:
                lead = told[index % len(told)]
                probe = probe.leading(lead, session.limits.get(lead.modality))
            probe = dataclasses.replace(
                probe, name=f"{probe.name} [{setting.describe()}]"
            )
            described = ", ".join(item.describe() for item in probe.items)
            log.record(
                probe,
                f"{described}; prompt {probe.prompt(hf.placeholders())!r}; request settings {setting.describe()}",
                notify,
            )
            session.run_probe(probe, checks, setting)


def _refuse_unjudged_kwargs(session: Session) -> None:
    """Raise when nothing under the user's ``--processor-kwargs`` could be compared: the settings, not the port, are at fault."""
    if session.under_settings["media"] and not session.under_settings["compared"]:
        said = (
            session.rejected
            or session.outside_contract
            or list(session.refused_settings.values())
            or ["no reason given"]
        )[-1]
        raise MmportError(
            f"the HF processor rejects every probe under --processor-kwargs (or gives it nothing to compare): {said}"
        )


def _check_whole_port(
    session: Session,
    checks: dict[str, CheckResult],
    port_path: Path,
    serve: ServeOptions | None,
    seed: int,
    notify: Callable[[str], None],
) -> None:
    """The checks of the port as a whole: embedding inputs, dummy inputs, limits; then close the per-probe
    checks and the model check's summary (``--model``); last, serving (``--serve``)."""
    from mmport.verify.embeds import check_embeddings

    notify("embedding inputs, dummy inputs and limits")
    hidden_size = getattr(
        session.hf.snapshot.load_config().get_text_config(), "hidden_size", None
    )
    if hidden_size is None:
        checks[
            "embeds"
        ].skipped = "the config names no text hidden size to shape embeddings by"
    else:
        check_embeddings(session, checks["embeds"], hidden_size)
    session.check_dummy(checks["dummy"])
    session.check_limits(checks["limits"])
    session.finish(checks)
    if session.model_check is not None:
        session.model_check.summarize()
    _check_serve(session.hf.snapshot, port_path, checks["serve"], serve, seed, notify)


def _request_settings(
    hf: HFReference,
    fits: FitJudge,
    processor_kwargs: dict | None,
    seed: int,
    per_modality: int,
    notify: Callable[[str], None],
) -> list[Setting]:
    """The settings probes also run under: the user's (``--processor-kwargs``), else drawn from HF's count changes.

    Either way only settings the HF model can take (``fits``, a
    :class:`~mmport.verify.fit.FitJudge`): vLLM's users can only send those.
    A drawn one the model cannot take is replaced by another that it can.
    """
    from mmport.verify.settings import check_known_kwargs, count_changing_settings

    if processor_kwargs:
        check_known_kwargs(hf.processor, processor_kwargs)
        pinned = Setting(dict(processor_kwargs), origin="pinned")
        fit = fits.fit(pinned)
        if fit.verdict == "not applicable":
            # Nothing the user asked for can be judged: no engine serves such a request.
            raise MmportError(
                f"--processor-kwargs {pinned.describe()} is not applicable to this checkpoint: {fit.reason}"
            )
        return [pinned]
    notify("finding settings that change HF's counts (and that the HF model takes)")
    return count_changing_settings(hf, seed, per_modality, keep=fits.applicable)


def _check_serve(
    snapshot,
    port_path: Path,
    result: CheckResult,
    serve: ServeOptions | None,
    seed: int,
    notify: Callable[[str], None],
) -> None:
    """The ``serve`` check: skipped unless asked for, and for ``--port vllm`` (there is no model file to serve)."""
    from mmport.serve import check_serve

    if serve is None:
        result.skipped = (
            "pass --serve to serve the port's model class in a real vLLM engine"
        )
    elif str(port_path) == VLLM_PORT:
        result.skipped = "--port vllm names vLLM's own processor: there is no generated model class to serve"
    else:
        served = (
            "the snapshot's checkpoint" if serve.weights else "tiny twin checkpoints"
        )
        notify(f"serving the port in a vLLM engine ({served})…")
        check_serve(snapshot, Path(port_path), result, seed=seed, options=serve)
