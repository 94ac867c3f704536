"""The ``mmport`` command line: thin typer commands over the library.

Heavy imports (torch, transformers) happen inside commands, so ``mmport
--help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import sys

import typer
from typer.core import TyperGroup

from mmport import __version__

__all__ = ["app", "main"]

class _OneLineErrors(TyperGroup):
    """A command group whose usage errors are one line on stderr (exit 2), as every other error."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # noqa: D401 - click's entry point
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.exceptions.TyperException as exc:  # a usage error: unknown option, bad value, ...
            if type(exc).__name__ == "NoArgsIsHelpError":  # `mmport` alone: the help, as asked
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
    str, typer.Argument(metavar="REF", help="A snapshot directory, a hub id (org/name) or a transformers model_type.")
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
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an internal error.")] = False,
) -> None:
    """Port Hugging Face multimodal models to vLLM and prove the port right."""
    _debug[0] = debug


def _fail(exc: Exception, code: int = 2):
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
        _fail(RuntimeError(f"internal error while {_step[0]}: {one_line(exc)}; re-run with --debug for the traceback"), 3)


def _analyze(ref: str):
    from mmport.analyzers import analyze
    from mmport.console import err_console
    from mmport.sources import resolve

    # Progress goes to stderr so that `inspect --json` output stays clean.
    with err_console.status(f"resolving {ref}…") as status:
        _progress(f"resolving {ref}")
        snapshot = resolve(ref)
        _progress(f"analysing {snapshot.model_type}")
        status.update(f"analysing {snapshot.model_type}…")
        return analyze(snapshot)


@app.command()
def inspect(
    ref: RefArg,
    json_out: Annotated[bool, typer.Option("--json", help="Print the PortSpec as JSON.")] = False,
) -> None:
    """Report what a port needs, each fact with the HF source line it came from."""
    spec = _run(lambda: _analyze(ref))
    from mmport.console import console, spec_table
    from mmport.spec import to_json

    if json_out:
        typer.echo(to_json(spec))
    else:
        console.print(spec_table(spec))


@app.command()
def scaffold(
    ref: RefArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to write the port into.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
) -> None:
    """Render a complete vLLM port (processing, model, parity test) into DIR."""
    from mmport.render import render_port, write_files

    def action():
        spec = _analyze(ref)
        _progress(f"rendering the port of {spec.model_type}")
        return write_files(render_port(spec), output, force=force)

    written = _run(action)
    from mmport.console import console

    for path in written:
        console.print(f"wrote {path}")


@app.command()
def verify(
    ref: RefArg,
    port: Annotated[Path, typer.Option("--port", help="The port's processing module (a .py file).")],
    probes: Annotated[int, typer.Option("--probes", min=1, help="Number of seeded probe cases.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the probes.")] = 0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write a JSON report to this file.")] = None,
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write a JUnit XML report to this file.")] = None,
    backend: Annotated[str, typer.Option("--backend", help="auto (real vLLM when importable), vllm or bundled.")] = "auto",
    model: Annotated[bool, typer.Option("--model", help="Also check the port against the HF model itself.")] = False,
    device: Annotated[str, typer.Option("--device", help="With --model: auto (CUDA when present), cuda or cpu.")] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="With --model: auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16 or float16.")] = "auto",
    tiny: Annotated[bool, typer.Option("--tiny", help="With --model: a tiny twin of the config (same geometry, small widths).")] = False,
    weights: Annotated[bool, typer.Option("--weights", help="With --model: load the snapshot's weights instead of a seeded random init.")] = False,
    processor_kwargs: Annotated[
        str | None,
        typer.Option(
            "--processor-kwargs",
            help="JSON object of request processor kwargs (vLLM's mm_processor_kwargs) to probe under, "
            "instead of the settings drawn from those that change HF's counts.",
        ),
    ] = None,
) -> None:
    """Check a port against the HF processor (and with --model, the HF model).

    Exit 0 pass, 1 a check failed, 2 bad input.
    """
    from mmport.console import console, err_console, report_table
    from mmport.errors import PortLoadError
    from mmport.verify import ModelOptions, verify_port
    from mmport.verify.settings import parse_processor_kwargs

    if not port.is_file():
        problem = "is a directory" if port.is_dir() else "does not exist"
        _fail(PortLoadError(f"port file '{port}' {problem}; pass the generated <model>_processing.py"))
    for path in (json_path, junit_path):
        if path is not None and not path.parent.is_dir():
            _fail(ValueError(f"cannot write report '{path}': directory '{path.parent}' does not exist"))
        if path is not None and path.is_dir():
            _fail(ValueError(f"cannot write report '{path}': it is a directory; name a file"))
    if not model and (tiny or weights or device != "auto" or dtype != "auto"):
        _fail(ValueError("--device, --dtype, --tiny and --weights apply to the model check; add --model"))
    options = ModelOptions(device, dtype, tiny, weights) if model else None
    pinned = _run(lambda: parse_processor_kwargs(processor_kwargs))
    with err_console.status("verifying…") as status:

        def progress(message: str) -> None:
            _progress(f"verifying ({message})")
            status.update(message)

        report = _run(
            lambda: verify_port(
                ref, port, probes=probes, seed=seed, backend=backend, progress=progress, model=options, processor_kwargs=pinned
            )
        )
    console.print(report_table(report))
    for path, text in ((json_path, report.to_json()), (junit_path, report.to_junit())):
        if path is not None:
            path.write_text(text)
    console.print(f"{'PASS' if report.passed else 'FAIL'} in {report.seconds:.1f}s")
    raise typer.Exit(0 if report.passed else 1)


def main() -> None:
    """Console-script entry point."""
    app()
