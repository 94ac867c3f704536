"""The ``mmport`` command line: thin typer commands over the library.

Heavy imports (torch, transformers) happen inside commands, so ``mmport
--help`` stays fast; its pages are printed by :mod:`mmport.launch` without
importing this module at all.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from mmport import __version__

if TYPE_CHECKING:  # heavy at run time (mmport.verify pulls in the runtime); hints only
    from mmport.manifest import ManifestEntry
    from mmport.manifest.outcome import PortOutcome
    from mmport.testing.run import RunOptions
    from mmport.verify import ModelOptions, ServeOptions

__all__ = ["app", "main"]


class _OneLineErrors(TyperGroup):
    """A command group whose usage errors are one line on stderr (exit 2), as every other error."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        # click's own parameters, so that standalone_mode is never passed twice.
        try:
            code = super().main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )
        except (
            typer.exceptions.TyperException
        ) as exc:  # a usage error: unknown option, bad value, ...
            if (
                type(exc).__name__ == "NoArgsIsHelpError"
            ):  # `mmport` alone: the help, as asked
                typer.echo(exc.format_message())
                code = 0
            else:
                from mmport.console import error

                error(exc.format_message().strip().splitlines()[0])
                code = exc.exit_code
        except typer.Abort:
            code = 1
        code = code if isinstance(code, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="mmport",
    help="Port Hugging Face multimodal models to vLLM and prove the port right.",
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: typer's rich help would import rich's markdown renderer and
    # pygments on every start (about 60 ms), for layout only.
    rich_markup_mode=None,
)

RefArg = Annotated[
    str,
    typer.Argument(
        metavar="REF",
        help="A snapshot directory, a hub id (org/name) or a transformers model_type.",
    ),
]

# What the command is doing now, named in the one line an internal error prints.
_step = ["starting"]
_debug = [False]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mmport {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version."
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of an internal error.")
    ] = False,
) -> None:
    """Port Hugging Face multimodal models to vLLM and prove the port right."""
    _debug[0] = debug


def _fail(exc: Exception, code: int = 2) -> NoReturn:
    """Report a user mistake as one red line and leave with ``code``."""
    from mmport.console import error

    error(str(exc))
    raise typer.Exit(code)


def _progress(message: str) -> None:
    """Remember what the command is doing (for the internal-error line)."""
    _step[0] = message


def _run(action):
    """Run ``action``: a user mistake is one red line and exit 2, a bug of mmport's one line and exit 3.

    With ``--debug`` an internal error raises, so its traceback shows.
    """
    from mmport.errors import MmportError, one_line

    try:
        return action()
    except MmportError as exc:
        _fail(exc, exc.exit_code)
    except (KeyboardInterrupt, typer.Exit):
        raise
    except Exception as exc:
        if _debug[0]:
            raise
        _fail(
            RuntimeError(
                f"internal error while {_step[0]}: {one_line(exc)}; re-run with --debug for the traceback"
            ),
            3,
        )


def _analyze(
    ref: str,
    trust_remote_code: bool = False,
    processor_code: Path | None = None,
    before: Callable[[Any], None] | None = None,
):
    """Resolve and analyse ``ref``; ``before`` sees the snapshot first (a check that
    needs only its model_type fails there, before the analysis)."""
    from mmport.analyzers import analyze
    from mmport.console import err_console
    from mmport.sources import resolve

    # Progress goes to stderr so that `inspect --json` output stays clean.
    with err_console.status(f"resolving {ref}…") as status:
        _progress(f"resolving {ref}")
        snapshot = resolve(
            ref, trust_remote_code=trust_remote_code, processor_code=processor_code
        )
        if before is not None:
            before(snapshot)
        _progress(f"analysing {snapshot.model_type}")
        status.update(f"analysing {snapshot.model_type}…")
        return analyze(snapshot)


def _inspect_statically(ref: str, processor_code: Path | None = None):
    """The static read of a snapshot that ships its own code (or of --processor-code's): nothing of that code runs."""
    from mmport.analyzers.remote_static import inspect_statically
    from mmport.sources import resolve

    snapshot = resolve(ref, processor_code=processor_code)
    return inspect_statically(
        snapshot.path, snapshot.model_type, snapshot.processor_code
    )


TrustOption = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        help="Let the code a snapshot ships (auto_map: processing_*.py, ...) run; without it none of it is imported.",
    ),
]
ProcessorCodeOption = Annotated[
    Path | None,
    typer.Option(
        "--processor-code",
        metavar="PATH",
        help="A directory or package holding the processor class when the snapshot does not ship it (DeepSeek-VL2); "
        "used in place of AutoProcessor's, and run only with --trust-remote-code.",
    ),
]


@app.command()
def inspect(
    ref: RefArg,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the PortSpec as JSON.")
    ] = False,
    trust_remote_code: TrustOption = False,
    processor_code: ProcessorCodeOption = None,
) -> None:
    """Report what a port needs, each fact with the HF source line it came from.

    A snapshot that ships its own code is read without running it unless
    --trust-remote-code is given.
    """
    from mmport.console import console, spec_table, static_table
    from mmport.errors import RemoteCodeConsentError
    from mmport.spec import ChatPortSpec, to_json

    def action():
        try:
            spec = _analyze(ref, trust_remote_code, processor_code)
        except RemoteCodeConsentError:
            _progress(f"reading {ref}'s own code without running it")
            return _inspect_statically(ref, processor_code)
        # No processor class (InternVL2 chat): the static read lists the facts its port follows.
        return _inspect_statically(ref) if isinstance(spec, ChatPortSpec) else spec

    spec = _run(action)
    from mmport.analyzers.remote_static import StaticReport

    static = isinstance(spec, StaticReport)
    if json_out:
        typer.echo(spec.to_json() if static else to_json(spec))
    else:
        console.print(static_table(spec) if static else spec_table(spec))


@app.command()
def scaffold(
    ref: RefArg,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Directory to write the port into."),
    ] = None,
    vllm_tree: Annotated[
        Path | None,
        typer.Option(
            "--vllm-tree",
            help="A vLLM source tree to write the port into, registering its "
            "architecture (registry.py, and tests/models/registry.py where present).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite existing files.")
    ] = False,
    trust_remote_code: TrustOption = False,
    processor_code: ProcessorCodeOption = None,
) -> None:
    """Render a complete vLLM port (processing, model, parity test) into DIR."""
    from mmport.render import render_port, write_files

    _check_destination(output, vllm_tree)
    findings: list[str] = []

    def action():
        before = _destination_checked(output, vllm_tree, force)
        spec = _analyze(ref, trust_remote_code, processor_code, before)
        _progress(f"rendering the port of {spec.model_type}")
        files = render_port(spec)
        findings.extend(f for file in files for f in file.findings)
        if vllm_tree is None:
            assert output is not None  # _check_destination: one of them
            return [
                ("wrote", path, "") for path in write_files(files, output, force=force)
            ]
        from mmport.render.vllm_tree import write_into_tree

        edits = write_into_tree(
            files,
            vllm_tree,
            module=spec.module_name,
            architecture=spec.architecture,
            example=ref,
            force=force,
        )
        return [(e.action, e.path, e.detail) for e in edits]

    _print_written(_run(action), findings)


def _check_destination(output: Path | None, vllm_tree: Path | None) -> None:
    """Exactly one place for the port: ``-o DIR`` or ``--vllm-tree SRC``."""
    if output is None and vllm_tree is None:
        _fail(ValueError("name where the port goes: -o DIR, or --vllm-tree SRC"))
    if output is not None and vllm_tree is not None:
        _fail(
            ValueError(
                "-o and --vllm-tree both name where the port goes; give one of them"
            )
        )


def _destination_checked(
    output: Path | None, vllm_tree: Path | None, force: bool
) -> Callable[[Any], None] | None:
    """Check where the port goes before anything is resolved (a wrong vLLM tree, an
    output that cannot be written), and return the check that needs the snapshot's
    model_type: the port's files already there, before the analysis."""
    if vllm_tree is not None:
        from mmport.render.vllm_tree import check_tree

        check_tree(vllm_tree)
        return None
    from mmport.render import check_output, port_file_names
    from mmport.spec import module_name

    assert output is not None
    check_output(output)

    def not_there_yet(snapshot: Any) -> None:
        names = [] if force else port_file_names(module_name(snapshot.model_type))
        check_output(output, [output / name for name in names])

    return not_there_yet


def _print_written(done: list[tuple[str, Path, str]], findings: list[str]) -> None:
    """Each file written or edited, then what vLLM's lint still finds in them: exit 3 if any.

    mmport promises files vLLM's lint passes, so one it does not is mmport's
    fault; the files stay written for inspection.
    """
    from mmport.console import console

    for action_name, path, detail in done:
        console.print(f"{action_name} {path}" + (f" ({detail})" if detail else ""))
    for finding in findings:
        console.print(f"[red]vLLM's lint:[/] {finding}", markup=True, highlight=False)
    if findings:
        files = sorted({finding.split(":", 1)[0] for finding in findings})
        _fail(
            RuntimeError(
                f"vLLM's lint finds {len(findings)} problem(s) in {', '.join(files)}; "
                "the files are written for inspection (an mmport bug: please report it)"
            ),
            3,
        )


def _check_report_paths(*paths: Path | None) -> None:
    """Each report file must be writable where named: a mistake there fails before any slow work."""
    for path in paths:
        if path is not None and not path.parent.is_dir():
            _fail(
                ValueError(
                    f"cannot write report '{path}': directory '{path.parent}' does not exist"
                )
            )
        if path is not None and path.is_dir():
            _fail(
                ValueError(
                    f"cannot write report '{path}': it is a directory; name a file"
                )
            )


def _check_report_dir(directory: Path | None) -> None:
    """A directory for the HTML pages: absent (it is made, under an existing parent) or a directory, never a file."""
    if directory is None:
        return
    if directory.exists() and not directory.is_dir():
        _fail(
            ValueError(
                f"cannot write HTML reports into '{directory}': it is a file; with --manifest, --html names a directory"
            )
        )
    if not directory.parent.is_dir():
        _fail(
            ValueError(
                f"cannot write HTML reports into '{directory}': directory '{directory.parent}' does not exist"
            )
        )


@app.command()
def verify(
    ref: Annotated[
        str | None,
        typer.Argument(
            metavar="REF",
            help="A snapshot directory, a hub id (org/name) or a transformers model_type; not with --manifest.",
        ),
    ] = None,
    port: Annotated[
        Path | None,
        typer.Option(
            "--port",
            help="The port's processing module (a .py file), or `vllm`: the processor vLLM registers for REF.",
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            "--manifest",
            help="Verify many ports: a pyproject.toml whose [tool.mmport] table lists ports = [{ref, port}, ...], "
            "or a directory of generated ports (each against the REF in its header).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="With --manifest: pytest-xdist worker processes (default: 2, or 1 on one core).",
        ),
    ] = None,
    probes: Annotated[
        int, typer.Option("--probes", min=1, help="Number of seeded probe cases.")
    ] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the probes.")] = 0,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write a JSON report to this file (with --manifest, a list of them).",
        ),
    ] = None,
    junit_path: Annotated[
        Path | None,
        typer.Option(
            "--junit",
            help="Write a JUnit XML report to this file (with --manifest, pytest's: a case per port and check).",
        ),
    ] = None,
    html_path: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write a self-contained HTML report (checks, first difference, count-vs-size plots) to this file "
            "(with --manifest, a directory: a page per port and index.html linking them).",
        ),
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            "--backend", help="auto (real vLLM when importable), vllm or bundled."
        ),
    ] = "auto",
    model: Annotated[
        bool,
        typer.Option(
            "--model", help="Also check the port against the HF model itself."
        ),
    ] = False,
    device: Annotated[
        str,
        typer.Option(
            "--device", help="With --model: auto (CUDA when present), cuda or cpu."
        ),
    ] = "auto",
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            help="With --model: auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16 or float16.",
        ),
    ] = "auto",
    tiny: Annotated[
        bool,
        typer.Option(
            "--tiny",
            help="With --model: a tiny twin of the config (same geometry, small widths).",
        ),
    ] = False,
    weights: Annotated[
        bool,
        typer.Option(
            "--weights",
            help="With --model: load the snapshot's weights instead of a seeded random init; "
            "with --serve: serve the snapshot's own checkpoint instead of tiny twins.",
        ),
    ] = False,
    processor_kwargs: Annotated[
        str | None,
        typer.Option(
            "--processor-kwargs",
            help="JSON object of request processor kwargs (vLLM's mm_processor_kwargs) to probe under, "
            "instead of the settings drawn from those that change HF's counts.",
        ),
    ] = None,
    settings: Annotated[
        int,
        typer.Option(
            "--settings",
            min=0,
            help="Request settings drawn per modality from those that change HF's counts (0: defaults only).",
        ),
    ] = 3,
    trust_remote_code: TrustOption = False,
    processor_code: ProcessorCodeOption = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Also serve the port's model class in a real vLLM engine (MMPORT_SERVE_PYTHON) on a tiny twin "
            "checkpoint, in the hub and the transformers-saved layouts, and compare its greedy tokens with HF generate's.",
        ),
    ] = False,
    serve_ranks: Annotated[
        int,
        typer.Option(
            "--serve-ranks",
            min=1,
            help="With --serve: tensor-parallel ranks the engine runs the model on.",
        ),
    ] = 1,
) -> None:
    """Check a port against the HF processor (and with --model, the HF model; with --serve, a real vLLM engine).

    REF --port PORT checks one port; --manifest checks many in one run.
    Exit 0 pass, 1 a check failed, 2 bad input, 3 an internal error, 4 cannot judge
    (nothing failed, but the snapshot lacks what a probe needs); with --manifest,
    the worst of the ports (3 > 2 > 1 > 4 > 0).
    """
    if manifest is not None:
        per_port = {
            "REF": ref is not None,
            "--port": port is not None,
            "--processor-kwargs": processor_kwargs is not None,
            "--trust-remote-code": trust_remote_code,
            "--processor-code": processor_code is not None,
            "--settings": settings != 3,
            "--model": model or tiny or weights or device != "auto" or dtype != "auto",
            "--serve": serve or serve_ranks != 1,
        }
        _refuse_with_manifest([name for name, given in per_port.items() if given])
        _verify_manifest(
            manifest, workers, probes, seed, backend, json_path, junit_path, html_path
        )
    if ref is None or port is None:
        _fail(
            ValueError(
                "pass REF and --port PORT to verify one port, or --manifest PATH to verify many"
            )
        )
    _check_one_port_options(
        port,
        workers=workers,
        model=model,
        tiny=tiny,
        weights=weights,
        device=device,
        dtype=dtype,
        serve=serve,
        serve_ranks=serve_ranks,
    )
    _check_report_paths(json_path, junit_path, html_path)
    from mmport.verify import ModelOptions, ServeOptions

    options = ModelOptions(device, dtype, tiny, weights) if model else None
    served = (
        ServeOptions(weights=weights, tensor_parallel=serve_ranks) if serve else None
    )
    reports = {"json": json_path, "junit": junit_path, "html": html_path}
    _verify_one(
        ref,
        port,
        probes,
        seed,
        backend,
        options,
        processor_kwargs,
        reports,
        settings,
        trust_remote_code,
        served,
        processor_code,
    )


def _check_one_port_options(
    port: Path,
    *,
    workers: int | None,
    model: bool,
    tiny: bool,
    weights: bool,
    device: str,
    dtype: str,
    serve: bool,
    serve_ranks: int,
) -> None:
    """A single port's options that only make sense together: one line and exit 2 otherwise."""
    if workers is not None:
        _fail(
            ValueError(
                "--workers applies to --manifest runs; a single port runs in this process"
            )
        )
    if str(port) != "vllm" and not port.is_file():
        from mmport.errors import PortLoadError

        problem = "is a directory" if port.is_dir() else "does not exist"
        _fail(
            PortLoadError(
                f"port file '{port}' {problem}; pass the generated <model>_processing.py"
            )
        )
    if not model and (tiny or device != "auto" or dtype != "auto"):
        _fail(
            ValueError(
                "--device, --dtype and --tiny apply to the model check; add --model"
            )
        )
    if weights and not (model or serve):
        _fail(
            ValueError(
                "--weights applies to the model check (--model) and to serving (--serve); add one"
            )
        )
    if serve_ranks != 1 and not serve:
        _fail(ValueError("--serve-ranks applies to serving; add --serve"))


def _refuse_with_manifest(given: list[str]) -> None:
    """Options that say something per port: the manifest says it, so on the command line they are a mistake."""
    if given:
        _fail(
            ValueError(
                f"{', '.join(given)} cannot go with --manifest: the manifest names each port, its ref and options"
            )
        )


def _verify_one(
    ref: str,
    port: Path,
    probes: int,
    seed: int,
    backend: str,
    options: ModelOptions | None,
    processor_kwargs: str | None,
    reports: dict[str, Path | None],
    settings: int,
    trust_remote_code: bool,
    serve: ServeOptions | None = None,
    processor_code: Path | None = None,
) -> NoReturn:
    """``verify REF --port PORT``: the check table, the reports (``reports``: json, junit, html paths), exit 0, 1 or 4."""
    from mmport.console import console, err_console, report_table
    from mmport.verify import verify_port
    from mmport.verify.settings import parse_processor_kwargs

    pinned = _run(lambda: parse_processor_kwargs(processor_kwargs))
    with err_console.status("verifying…") as status:

        def progress(message: str) -> None:
            _progress(f"verifying ({message})")
            status.update(message)

        # What the port and the model code print as they run (DeepSeek-VL2's processor
        # prints each token it adds, whenever it is built) goes to stderr: stdout is the report.
        with contextlib.redirect_stdout(sys.stderr):
            report = _run(
                lambda: verify_port(
                    ref,
                    port,
                    probes=probes,
                    seed=seed,
                    backend=backend,
                    progress=progress,
                    model=options,
                    processor_kwargs=pinned,
                    settings_per_modality=settings,
                    curves=reports["html"] is not None,
                    trust_remote_code=trust_remote_code,
                    serve=serve,
                    processor_code=processor_code,
                )
            )
    console.print(report_table(report))
    writers = {
        "json": report.to_json,
        "junit": report.to_junit,
        "html": lambda: _html(report),
    }
    for kind, path in reports.items():
        if path is not None:
            path.write_text(writers[kind](), encoding="utf-8")
    from mmport.errors import verdict_exit_code

    console.print(
        f"{report.verdict.replace('_', ' ').upper()} in {report.seconds:.1f}s"
    )
    raise typer.Exit(verdict_exit_code(report.verdict))


def _html(report) -> str:
    from mmport.verify.html import render_html

    return render_html(report)


def _verify_manifest(
    manifest: Path,
    workers: int | None,
    probes: int,
    seed: int,
    backend: str,
    json_path: Path | None,
    junit_path: Path | None,
    html_dir: Path | None = None,
) -> NoReturn:
    """``verify --manifest PATH``: every port as pytest items (mmport.testing.run), one summary table.

    pytest writes the JUnit file; with ``html_dir``, the plugin writes a page
    per port and an index linking them (mmport.manifest.html).

    The exit code is the worst any port would give on its own (see mmport.manifest.outcome.exit_code).
    """
    import time

    from mmport.console import console, manifest_table
    from mmport.manifest import load_manifest
    from mmport.manifest.outcome import combined_json, exit_code
    from mmport.testing.run import RunOptions, default_workers

    _progress(f"reading the manifest {manifest}")
    entries = _run(lambda: load_manifest(manifest))
    _check_report_paths(json_path, junit_path)
    _check_report_dir(html_dir)
    _check_backend(backend)
    options = RunOptions(
        workers or default_workers(), probes, seed, backend, junit_path, html_dir
    )
    started = time.perf_counter()
    outcomes = _run(lambda: _verify_with_progress(manifest.resolve(), entries, options))
    console.print(
        manifest_table(
            outcomes, workers=options.workers, wall=time.perf_counter() - started
        )
    )
    if json_path is not None:
        json_path.write_text(combined_json(outcomes))
    if html_dir is not None:
        console.print(f"HTML reports: {html_dir / 'index.html'}")
    code = exit_code(outcomes)
    said = {0: "PASS", 4: "CANNOT JUDGE"}.get(code, "FAIL")
    console.print(f"{said} in {time.perf_counter() - started:.1f}s")
    raise typer.Exit(code)


def _check_backend(backend: str) -> None:
    """A backend name every port would refuse is one mistake, said once (not once per port)."""
    from mmport.errors import MmportError

    if backend not in ("auto", "vllm", "bundled"):
        _fail(
            MmportError(
                f"unknown backend {backend!r}; choose one of auto, vllm, bundled"
            )
        )
    if backend == "vllm":
        from mmport.runtime.backends import select_backend

        _run(lambda: select_backend(backend))


def _verify_with_progress(
    manifest: Path, entries: list[ManifestEntry], options: RunOptions
) -> list[PortOutcome]:
    """Run :func:`mmport.testing.run.run_manifest` under a progress bar on stderr: ports done, ports running."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from mmport.console import progress_console
    from mmport.testing.run import run_manifest

    running: list[str] = []
    columns = (
        TextColumn("verify"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    # The bar's console writes where pytest's capture of the ports' output cannot reach.
    with (
        progress_console() as bar_console,
        Progress(*columns, console=bar_console, transient=True) as bar,
    ):
        task = bar.add_task("", total=len(entries))

        def started(entry: ManifestEntry) -> None:
            running.append(entry.label)
            _progress(f"verifying {entry.label}")
            bar.update(task, description=", ".join(running))

        def done(outcome: PortOutcome) -> None:
            if outcome.entry.label in running:
                running.remove(outcome.entry.label)
            bar.update(task, advance=1, description=", ".join(running))

        _progress(f"starting {options.workers} worker(s)")
        return run_manifest(manifest, entries, options, on_start=started, on_done=done)


def main() -> None:
    """Run the app on ``sys.argv`` (:func:`mmport.launch.main` calls it for all but the help pages)."""
    app()
