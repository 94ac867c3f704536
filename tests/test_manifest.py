"""``mmport verify --manifest``: many real scaffolded ports in one run, and the CI recipes that run it.

A manifest is a pyproject.toml with a ``[tool.mmport]`` table, or a directory
of generated ports. The fast tests keep to two or three ports and two probes;
the 30-port run (wall time against the ports' own) is marked slow.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from conftest import invoke, mutated_port

ROOT = Path(__file__).resolve().parents[1]
CHECK_NAMES = [
    "tokens",
    "placeholders",
    "fields",
    "cache",
    "embeds",
    "dummy",
    "limits",
    "model",
    "serve",
]


def write_manifest(
    directory: Path, entries: list[tuple[str, Path | str]], extra: str = ""
) -> Path:
    """A pyproject.toml in ``directory`` listing (ref, port) pairs; ``extra`` goes inside each entry."""
    rows = [
        f"    {{ ref = {json.dumps(ref)}, port = {json.dumps(str(port))}{extra} }},"
        for ref, port in entries
    ]
    path = directory / "pyproject.toml"
    path.write_text(
        "\n".join(
            [
                "[project]",
                'name = "my-ports"',
                "",
                "[tool.mmport]",
                "ports = [",
                *rows,
                "]",
            ]
        )
        + "\n"
    )
    return path


def _assert_user_error(result, fragment: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2


def _junit_cases(junit: Path) -> list[tuple[str, str, str, str]]:
    """``(port, check, outcome, message)`` per ``<testcase>`` of the JUnit file pytest wrote for ``verify --manifest``.

    ``outcome`` is ``passed``, ``failure``, ``skipped`` or ``error``.
    """
    root = ET.parse(junit).getroot()
    assert [suite.get("name") for suite in root] == ["mmport verify"]
    cases = []
    for case in root.iter("testcase"):
        port = case.get("classname").removeprefix("pyproject.toml.")
        found = next(
            (c for c in case if c.tag in ("failure", "skipped", "error")), None
        )
        outcome = "passed" if found is None else found.tag
        message = "" if found is None else found.get("message", "")
        cases.append((port, case.get("name"), outcome, message))
    return cases


def _checks_of(cases: list[tuple[str, str, str, str]], port: str) -> list[str]:
    return [check for name, check, _, _ in cases if name == port]


def _off_by_one_llava(scaffolded, tmp_path: Path) -> Path:
    """The generated LLaVA port counting one image token too many."""
    return mutated_port(
        scaffolded("llava"),
        "llava",
        "        return num_image_tokens\n",
        "        return num_image_tokens + 1\n",
        tmp_path,
    )


@pytest.mark.slow  # whole CLI or pytest-xdist sessions: the slow stage
def test_passing_failing_and_crashing_ports_on_two_workers(
    scaffolded, tmp_path
) -> None:
    wrong = _off_by_one_llava(scaffolded, tmp_path)
    # A port that kills the process importing it: its pytest-xdist worker dies, the run goes on.
    killer = tmp_path / "killer_processing.py"
    killer.write_text("import os\n\nos._exit(7)\n")
    good = scaffolded("llava") / "llava_processing.py"
    other = scaffolded("paligemma") / "paligemma_processing.py"
    entries = [
        ("llava", good),
        ("llava", wrong.name),
        ("paligemma", other),
        ("llava", killer.name),
    ]
    junit, reports = tmp_path / "junit.xml", tmp_path / "verify.json"
    result = invoke(
        "verify",
        "--manifest",
        str(write_manifest(tmp_path, entries)),
        "--workers",
        "2",
        "--probes",
        "2",
        "--junit",
        str(junit),
        "--json",
        str(reports),
    )
    # The worst port decides: mmport could not verify one (3) over a failed check (1).
    assert result.returncode == 3, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if "_processing.py" in line]
    assert len(rows) == 4 and sum(" pass " in row for row in rows) == 2
    assert re.search(
        r"│ llava_processing\.py\s+│ llava\s+│ fail\s+│ tokens", result.stdout
    ), result.stdout
    assert re.search(
        r"│ killer_processing\.py\s+│ llava\s+│ error\s+│ the worker verifying this port died",
        result.stdout,
    )
    assert "2 / 4 pass" in result.stdout and "2 worker(s)" in result.stdout

    # pytest's JUnit: a case per port and check, each port's checks in the report's order.
    cases = _junit_cases(junit)
    for port in (str(good), "llava_processing.py", str(other)):
        assert _checks_of(cases, port) == CHECK_NAMES
    assert "tokens" in {
        check
        for port, check, outcome, _ in cases
        if port == "llava_processing.py" and outcome == "failure"
    }
    # The check the worker died on is xdist's crash report; a fresh worker then errors
    # every check of the port without importing it again.
    killed = [case for case in cases if case[0] == "killer_processing.py"]
    assert len(killed) == len(CHECK_NAMES) + 1
    assert all(outcome == "error" for _, _, outcome, _ in killed)
    assert sum("the worker verifying this port died" in c[3] for c in killed) == len(
        CHECK_NAMES
    )

    listed = json.loads(reports.read_text())
    assert [report["passed"] for report in listed] == [True, False, True, False]
    assert listed[1]["port"] == str(wrong) and listed[3]["exit_code"] == 3


@pytest.mark.slow
def test_a_worker_dying_after_the_other_left_does_not_stall_the_run(
    tmp_path,
) -> None:
    """The worker that dies holds a finished port, and the other worker has ended already.

    Each worker takes one of the two ports that do not import; the one that
    finishes first also takes the third, which kills it a few seconds later,
    once the other worker is gone. xdist queues both of the dead worker's ports
    again, the finished one first: the fresh worker must get the unfinished one.
    """
    for name in ("p0", "p1"):
        (tmp_path / f"{name}_processing.py").write_text(
            "import definitely_not_a_module\n"
        )
    (tmp_path / "p2_processing.py").write_text(
        "import os, time\n\ntime.sleep(8)\nos._exit(7)\n"
    )
    manifest = write_manifest(
        tmp_path, [("llava", f"{name}_processing.py") for name in ("p0", "p1", "p2")]
    )
    # A fresh interpreter with a time limit: this is a run that used to wait forever.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmport",
            "verify",
            "--manifest",
            str(manifest),
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert re.search(
        r"│ p2_processing\.py\s+│ llava\s+│ error\s+│ the worker verifying this port died",
        result.stdout,
    ), result.stdout


@pytest.mark.slow  # whole CLI or pytest-xdist sessions: the slow stage
def test_a_directory_of_ports_takes_each_ref_from_its_header(
    scaffolded, tmp_path
) -> None:
    shutil.copytree(scaffolded("llava"), tmp_path / "ports" / "llava")
    result = invoke(
        "verify",
        "--manifest",
        str(tmp_path / "ports"),
        "--workers",
        "1",
        "--probes",
        "2",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(
        r"llava/llava_processing\.py\s+│\s+llava\s+│\s+pass", result.stdout
    ), result.stdout


def test_a_port_with_bad_input_is_a_row_and_the_run_goes_on(
    scaffolded, tmp_path
) -> None:
    broken = tmp_path / "broken_processing.py"
    broken.write_text("import definitely_not_a_module\n")
    manifest = write_manifest(
        tmp_path,
        [
            ("llava", broken.name),
            ("llava", scaffolded("llava") / "llava_processing.py"),
        ],
    )
    junit = tmp_path / "junit.xml"
    result = invoke(
        "verify",
        "--manifest",
        str(manifest),
        "--workers",
        "1",
        "--probes",
        "2",
        "--junit",
        str(junit),
    )
    # The worst port decides: bad input (2) over a pass.
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert re.search(
        r"broken_processing\.py\s+│\s+llava\s+│\s+bad input\s+│.*broken_processing",
        result.stdout,
    ), result.stdout
    assert re.search(r"llava_processing\.py\s+│\s+llava\s+│\s+pass", result.stdout)
    # Every check of the port that does not import errors with mmport's one line.
    broken_cases = [c for c in _junit_cases(junit) if c[0] == "broken_processing.py"]
    assert [check for _, check, _, _ in broken_cases] == CHECK_NAMES
    assert all(
        outcome == "error" and "definitely_not_a_module" in message
        for _, _, outcome, message in broken_cases
    ), broken_cases


def test_a_failing_port_is_a_junit_case_per_check_written_by_pytest(
    scaffolded, tmp_path, monkeypatch
) -> None:
    """The manifest runs as a pytest session of its own: the project's pytest settings stay out of it."""
    wrong = _off_by_one_llava(scaffolded, tmp_path)
    good = scaffolded("llava") / "llava_processing.py"
    manifest = write_manifest(tmp_path, [("llava", good), ("llava", wrong.name)])
    # A project whose own tests are configured in ways that would break any pytest run of it.
    with manifest.open("a") as text:
        text.write('\n[tool.pytest.ini_options]\naddopts = "--no-such-option"\n')
    (tmp_path / "conftest.py").write_text(
        "raise SystemExit('the project conftest ran')\n"
    )
    monkeypatch.setenv("PYTEST_ADDOPTS", "--no-such-option-either")
    junit = tmp_path / "junit.xml"
    result = invoke(
        "verify",
        "--manifest",
        str(manifest),
        "--workers",
        "1",
        "--probes",
        "2",
        "--junit",
        str(junit),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    cases = _junit_cases(junit)
    assert [(port, check) for port, check, _, _ in cases] == [
        (port, check)
        for port in (str(good), "llava_processing.py")
        for check in CHECK_NAMES
    ]
    failed = {
        (port, check): message
        for port, check, outcome, message in cases
        if outcome == "failure"
    }
    assert {port for port, _ in failed} == {"llava_processing.py"} and (
        "llava_processing.py",
        "tokens",
    ) in failed
    # The plugin's own account of the failure: the first difference, the counts one apart.
    assert all(message.startswith("first difference:") for message in failed.values())
    assert {check for _, check, outcome, _ in cases if outcome == "skipped"} == {
        "model",
        "serve",
    }


def _port(directory: Path) -> Path:
    port = directory / "ports" / "x_processing.py"
    port.parent.mkdir(parents=True, exist_ok=True)
    port.write_text("# not generated by mmport\n")
    return port


# Broken manifests: each is exit 2, one line, no traceback, no report written.
BROKEN_MANIFESTS = {
    "not valid TOML": ("[tool.mmport\nports = []\n", "not valid TOML"),
    "no table": ('[project]\nname = "x"\n', "no [tool.mmport] table"),
    "empty list": ("[tool.mmport]\nports = []\n", "non-empty list 'ports'"),
    "ports not a list": ('[tool.mmport]\nports = "llava"\n', "non-empty list 'ports'"),
    "unknown table key": (
        '[tool.mmport]\nports = [{ref = "llava", port = "ports/x_processing.py"}]\nworkers = 4\n',
        "unknown key(s) workers",
    ),
    "unknown entry key": (
        '[tool.mmport]\nports = [{ref = "llava", port = "ports/x_processing.py", seed = 1}]\n',
        "unknown key(s) seed",
    ),
    "entry without port": ('[tool.mmport]\nports = [{ref = "llava"}]\n', "lacks port"),
    "entry not a table": (
        '[tool.mmport]\nports = ["llava"]\n',
        "ports[0] is not a table",
    ),
    "missing port file": (
        '[tool.mmport]\nports = [{ref = "llava", port = "ports/missing_processing.py"}]\n',
        "does not exist",
    ),
    "port is a directory": (
        '[tool.mmport]\nports = [{ref = "llava", port = "ports"}]\n',
        "is a directory",
    ),
    "model not a boolean": (
        '[tool.mmport]\nports = [{ref = "llava", port = "ports/x_processing.py", model = 1}]\n',
        "'model' must be",
    ),
    "empty processor_kwargs": (
        '[tool.mmport]\nports = [{ref = "llava", port = "ports/x_processing.py", processor_kwargs = {}}]\n',
        "'processor_kwargs' must be",
    ),
    "second entry broken": (
        '[tool.mmport]\nports = [{ref = "llava", port = "ports/x_processing.py"}, {ref = "", port = "ports/x_processing.py"}]\n',
        "ports[1]: 'ref' must be",
    ),
}


@pytest.mark.parametrize("name", list(BROKEN_MANIFESTS))
def test_broken_manifest(name: str, tmp_path) -> None:
    text, fragment = BROKEN_MANIFESTS[name]
    _port(tmp_path)
    manifest = tmp_path / "pyproject.toml"
    manifest.write_text(text)
    junit, reports = tmp_path / "junit.xml", tmp_path / "verify.json"
    _assert_user_error(
        invoke(
            "verify",
            "--manifest",
            str(manifest),
            "--junit",
            str(junit),
            "--json",
            str(reports),
        ),
        fragment,
    )
    assert not junit.exists() and not reports.exists()


def test_manifest_that_does_not_exist(tmp_path) -> None:
    _assert_user_error(
        invoke("verify", "--manifest", str(tmp_path / "nope.toml")), "does not exist"
    )


def test_directory_without_ports(tmp_path) -> None:
    _assert_user_error(
        invoke("verify", "--manifest", str(tmp_path)), "no *_processing.py"
    )


def test_directory_port_that_names_no_ref(tmp_path) -> None:
    _port(tmp_path)
    _assert_user_error(
        invoke("verify", "--manifest", str(tmp_path)), "pyproject.toml manifest"
    )


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["llava", "--manifest", "pyproject.toml"], "REF cannot go with --manifest"),
        (
            ["--manifest", "pyproject.toml", "--port", "x_processing.py"],
            "--port cannot go with --manifest",
        ),
        (
            ["--manifest", "pyproject.toml", "--tiny"],
            "--model cannot go with --manifest",
        ),
        (["--manifest", "pyproject.toml", "--workers", "0"], "--workers"),
        (["--manifest", "pyproject.toml", "--backend", "nope"], "unknown backend"),
        ([], "--manifest PATH to verify many"),
        (["llava"], "--manifest PATH to verify many"),
        (
            ["llava", "--port", "x_processing.py", "--workers", "2"],
            "--workers applies to --manifest",
        ),
    ],
)
def test_manifest_options_that_do_not_fit(
    args: list[str], fragment: str, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_manifest(tmp_path, [("llava", _port(tmp_path).relative_to(tmp_path))])
    (tmp_path / "x_processing.py").write_text("")
    _assert_user_error(invoke("verify", *args), fragment)


def _workflow() -> dict:
    """The GitHub Actions workflow docs/ci.md gives, parsed."""
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "docs" / "ci.md").read_text()
    block = re.search(r"```yaml\n(# \.github/workflows/.*?)```", text, re.DOTALL)
    assert block, (
        "docs/ci.md has no ```yaml block starting with its '# .github/workflows/...' path"
    )
    return yaml.safe_load(block.group(1))


def _verify_args(command: str) -> list[str]:
    """The arguments after ``mmport`` in the one line of ``command`` that runs mmport verify."""
    line = next(
        line
        for line in command.splitlines()
        if line.strip().startswith("mmport verify")
    )
    words = shlex.split(line)
    assert words[:2] == ["mmport", "verify"]
    return words[1:]


@pytest.mark.slow  # whole CLI or pytest-xdist sessions: the slow stage
def test_the_ci_workflow_runs_a_command_the_cli_accepts(
    scaffolded, tmp_path, monkeypatch
) -> None:
    workflow = _workflow()
    steps = workflow["jobs"]["verify"]["steps"]
    uses = [step.get("uses", "").split("@")[0] for step in steps]
    assert {
        "actions/checkout",
        "actions/setup-python",
        "actions/cache",
        "actions/upload-artifact",
    } <= set(uses)
    cache = next(
        step for step in steps if step.get("uses", "").startswith("actions/cache")
    )
    assert (
        "~/.cache/huggingface" in cache["with"]["path"]
        and "hashFiles('pyproject.toml')" in cache["with"]["key"]
    )
    run = "\n".join(step.get("run", "") for step in steps)
    args = _verify_args(run)
    upload = next(
        step
        for step in steps
        if step.get("uses", "").startswith("actions/upload-artifact")
    )
    assert upload["if"] == "always()"
    # The workflow's own command, in a checkout holding a one-port manifest.
    monkeypatch.chdir(tmp_path)
    shutil.copytree(scaffolded("llava"), tmp_path / "ports" / "llava")
    write_manifest(tmp_path, [("llava", "ports/llava/llava_processing.py")])
    for line in run.splitlines():
        if line.strip().startswith("mkdir"):
            for directory in shlex.split(line)[1:]:
                if not directory.startswith("-"):
                    (tmp_path / directory).mkdir(parents=True, exist_ok=True)
    result = invoke(*args, "--probes", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    written = [
        Path(args[args.index(option) + 1])
        for option in ("--junit", "--json")
        if option in args
    ]
    assert written and all((tmp_path / path).is_file() for path in written)
    assert str(upload["with"]["path"]).strip().rstrip("/") in {
        str(path.parent) for path in written
    }


# Slow stage: pre-commit runs a whole manifest session in processes of their own.
@pytest.mark.slow
def test_the_pre_commit_hook_runs_the_manifest(
    scaffolded, tmp_path, monkeypatch
) -> None:
    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    hook = next(hook for hook in hooks if hook["id"] == "mmport-verify")
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    assert re.search(
        hook["files"], "ports/llava/llava_processing.py"
    ) and not re.search(hook["files"], "ports/llava/llava.py")
    words = shlex.split(hook["entry"])
    assert words[0] == "mmport"
    monkeypatch.chdir(tmp_path)
    shutil.copytree(scaffolded("llava"), tmp_path / "ports" / "llava")
    write_manifest(tmp_path, [("llava", "ports/llava/llava_processing.py")])
    result = invoke(*words[1:], "--probes", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    # And the same entry with a failing port: pre-commit sees exit 1 and stops the commit.
    source = tmp_path / "ports" / "llava" / "llava_processing.py"
    source.write_text(
        source.read_text().replace(
            "        return num_image_tokens\n", "        return num_image_tokens + 1\n"
        )
    )
    assert invoke(*words[1:], "--probes", "2").returncode == 1


# Quick, passing families of docs/coverage.md; each is verified three times in the 30-port run.
QUICK_FAMILIES = (
    "llava",
    "paligemma",
    "vipllava",
    "blip-2",
    "instructblip",
    "colpali",
    "colqwen2",
    "deepseek_vl",
    "janus",
    "granite4_vision",
)


@pytest.mark.slow
def test_thirty_ports_in_one_run(scaffolded, tmp_path) -> None:
    """Thirty ports in one command on two workers: every port reported, every check a JUnit case.

    How close the pool comes to perfect sharing is a figure, not a pass/fail:
    benchmarks/manifest.py measures it and docs/ci.md keeps the numbers (a
    wall-time bound here failed on the load of whatever else the machine ran).
    """
    entries = []
    for family in QUICK_FAMILIES:
        port = next(scaffolded(family).glob("*_processing.py"))
        for copy in range(3):
            target = tmp_path / "ports" / f"{family}-{copy}"
            shutil.copytree(port.parent, target)
            entries.append((family, f"ports/{family}-{copy}/{port.name}"))
    manifest = write_manifest(tmp_path, entries)
    junit, reports = tmp_path / "junit.xml", tmp_path / "verify.json"
    result = invoke(
        "verify",
        "--manifest",
        str(manifest),
        "--workers",
        "2",
        "--junit",
        str(junit),
        "--json",
        str(reports),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    cases = _junit_cases(junit)
    ports = {port for port, _, _, _ in cases}
    assert len(ports) == 30 and all(
        _checks_of(cases, port) == CHECK_NAMES for port in ports
    )
    assert len(json.loads(reports.read_text())) == 30


@pytest.mark.slow  # whole CLI or pytest-xdist sessions: the slow stage
def test_html_pages_per_port_and_an_index_linking_them(scaffolded, tmp_path) -> None:
    wrong = _off_by_one_llava(scaffolded, tmp_path)
    entries = [
        ("llava", scaffolded("llava") / "llava_processing.py"),
        ("llava", wrong.name),
    ]
    manifest = write_manifest(tmp_path, entries)
    (tmp_path / "a_file").write_text("")
    _assert_user_error(
        invoke(
            "verify", "--manifest", str(manifest), "--html", str(tmp_path / "a_file")
        ),
        "it is a file",
    )
    pages = tmp_path / "reports"
    result = invoke(
        "verify",
        "--manifest",
        str(manifest),
        "--workers",
        "1",
        "--probes",
        "2",
        "--html",
        str(pages),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    index = (pages / "index.html").read_text()
    links = re.findall(r'<a href="([^"]+)">', index)
    assert len(links) == 2 and "1 / 2 ports pass" in index, index
    verdicts = [
        re.search(r"<title>[^<]*: (\w+)</title>", (pages / link).read_text())[1]
        for link in links
    ]
    assert verdicts == ["PASS", "FAIL"]
    assert "tokens" in (pages / links[1]).read_text()
