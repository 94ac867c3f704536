"""mmport's pytest plugin, run by pytest itself (``pytester``): a manifest of real ports as test items.

Each test builds a project whose pyproject.toml lists three scaffolded ports
in ``[tool.mmport]``: llava's and paligemma's as generated, and llava's with
its image token count one too many. pytest runs there in this process (torch
is imported once), except the pytest-xdist run, which is marked slow.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from conftest import mutated_port, with_support

from mmport.testing.shard import Shard, shard_labels
from mmport.testing.worker import WorkerGuard, drop_finished_units
from mmport.verify.report import CHECKS

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
GOOD, WRONG, OTHER = (
    "ports/llava/llava_processing.py",
    "ports/wrong/llava_processing.py",
    "ports/paligemma/paligemma_processing.py",
)
# The wrong port's checks that fail (seed 0, two probes, defaults only); the others pass or skip.
WRONG_FAILS = {"tokens", "placeholders", "dummy"}
# Checks that need an option the manifest does not give (--model, --serve): skipped on every port.
SKIPPED = {"model", "serve"}

PROJECT = """\
[project]
name = "my-ports"

[tool.pytest.ini_options]
# Two probes under the processor's defaults keep each port to about a second.
addopts = "--mmport-probes 2 --mmport-settings 0"

[tool.mmport]
ports = [
    {{ ref = "llava", port = "{GOOD}" }},
    {{ ref = "llava", port = "{WRONG}" }},
    {{ ref = "paligemma", port = "{OTHER}" }},
]
"""


def plugin_args() -> list[str]:
    """``-p mmport.pytest_plugin`` where the pytest11 entry point is not installed (a checkout on PYTHONPATH)."""
    installed = any(
        ep.value == "mmport.pytest_plugin" for ep in entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "mmport.pytest_plugin"]


@pytest.fixture(scope="module")
def warm(scaffolded, tmp_path_factory) -> None:
    """Verify a failing llava port and paligemma's here first, so that this process imports all they need.

    pytest run in this process (``runpytest``) drops every module first imported
    during the run when it ends; torch imported a second time crashes the interpreter.
    """
    from mmport.verify import verify_port

    out = tmp_path_factory.mktemp("warm")
    wrong = mutated_port(
        scaffolded("llava"),
        "llava",
        "        return num_image_tokens\n",
        "        return num_image_tokens + 1\n",
        out,
    )
    verify_port("llava", wrong, probes=2, settings_per_modality=0)
    verify_port(
        "paligemma",
        scaffolded("paligemma") / "paligemma_processing.py",
        probes=2,
        settings_per_modality=0,
    )


@pytest.fixture
def project(pytester: pytest.Pytester, scaffolded, warm) -> pytest.Pytester:
    """The three-port project, with pytest's working directory in it."""
    for ref, label in (("llava", GOOD), ("paligemma", OTHER)):
        target = pytester.path / label
        target.parent.mkdir(parents=True)
        target.write_text((scaffolded(ref) / Path(label).name).read_text())
        with_support(scaffolded(ref), target.parent)
    (pytester.path / WRONG).parent.mkdir(parents=True)
    mutated_port(
        scaffolded("llava"),
        "llava",
        "        return num_image_tokens\n",
        "        return num_image_tokens + 1\n",
        pytester.path / Path(WRONG).parent,
    )
    (pytester.path / "pyproject.toml").write_text(
        PROJECT.format(GOOD=GOOD, WRONG=WRONG, OTHER=OTHER)
    )
    return pytester


def collected(result: pytest.RunResult) -> list[str]:
    """The node ids a ``--collect-only -q`` run listed."""
    return [line for line in result.stdout.lines if "::" in line]


def ports_of(node_ids: list[str]) -> set[str]:
    """The ports (``pyproject.toml::PORT::check``) some node ids belong to."""
    return {node_id.split("::")[1] for node_id in node_ids}


def _run_python(script: str) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter that imports this checkout's mmport."""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def junit_cases(path: Path) -> dict[tuple[str, str], str]:
    """``(port, check)`` → ``passed``, ``failure``, ``skipped`` or ``error``, from a pytest --junitxml file."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        port = case.get("classname").removeprefix("pyproject.toml.")
        outcome = next(
            (
                child.tag
                for child in case
                if child.tag in ("failure", "skipped", "error")
            ),
            "passed",
        )
        cases[(port, case.get("name"))] = outcome
    return cases


def test_the_entry_point_is_declared() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "entry-points"
    ]["pytest11"]
    assert declared == {"mmport": "mmport.pytest_plugin"}
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["test"]
    assert any(extra.startswith("pytest-xdist") for extra in extras)


def test_without_a_manifest_the_plugin_collects_as_before_and_imports_nothing_heavy(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    result = pytester.runpytest(*plugin_args(), "--collect-only", "-q")
    assert collected(result) == ["test_plain.py::test_one"]
    refused = pytester.runpytest(*plugin_args(), "--mmport-shard", "1/2")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "--mmport-shard needs a manifest" in refused.stderr.str()
    # pytest loads the plugin in every project of an environment with mmport installed.
    probe = "import sys, mmport.pytest_plugin; print(sorted(m for m in ('torch', 'transformers', 'mmport.verify', 'mmport.testing') if m in sys.modules))"
    imported = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert imported.stdout.strip() == "[]"


def test_three_ports_one_failing(project: pytest.Pytester) -> None:
    junit = project.path / "junit.xml"
    result = project.runpytest(*plugin_args(), f"--junitxml={junit}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    cases = junit_cases(junit)
    # One testcase per port and check, in the manifest's and the report's order.
    assert list(cases) == [
        (port, check) for port in (GOOD, WRONG, OTHER) for check in CHECKS
    ]
    failed = {check for (port, check), outcome in cases.items() if outcome == "failure"}
    assert {port for (port, _), outcome in cases.items() if outcome == "failure"} == {
        WRONG
    }
    assert failed == WRONG_FAILS
    assert {
        check for (_, check), outcome in cases.items() if outcome == "skipped"
    } == SKIPPED
    result.assert_outcomes(
        passed=27 - len(WRONG_FAILS) - 3 * len(SKIPPED),
        failed=len(WRONG_FAILS),
        skipped=3 * len(SKIPPED),
    )
    # The failing item shows mmport's first difference: the token counts one apart.
    result.stdout.fnmatch_lines(
        [
            "*_ placeholders check of ports/wrong/llava_processing.py _*",
            "first difference: *HF 576, port 577*",
        ]
    )
    result.stdout.fnmatch_lines(
        [f"FAILED pyproject.toml::{WRONG}::tokens - first difference*"]
    )
    # Each port's time is recorded for the next shard split.
    durations = json.loads(
        (project.path / ".pytest_cache" / "v" / "mmport" / "durations").read_text()
    )
    assert set(durations) == {GOOD, WRONG, OTHER} and all(
        seconds > 0 for seconds in durations.values()
    )


@pytest.mark.slow
def test_lf_reruns_the_failed_checks_and_x_stops_at_the_first(
    project: pytest.Pytester,
) -> None:
    project.runpytest(*plugin_args())
    rerun = project.runpytest(*plugin_args(), "--lf")
    rerun.assert_outcomes(failed=len(WRONG_FAILS), deselected=27 - len(WRONG_FAILS))

    stopped = project.runpytest(*plugin_args(), "-x", "--cache-clear")
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED
    stopped.assert_outcomes(
        passed=len(CHECKS) - len(SKIPPED), skipped=len(SKIPPED), failed=1
    )


def test_k_selects_ports_by_path_ref_and_check(project: pytest.Pytester) -> None:
    by_ref = collected(
        project.runpytest(*plugin_args(), "--collect-only", "-q", "-k", "paligemma")
    )
    assert by_ref == [f"pyproject.toml::{OTHER}::{check}" for check in CHECKS]
    by_check = collected(
        project.runpytest(
            *plugin_args(), "--collect-only", "-q", "-k", "llava and tokens"
        )
    )
    assert by_check == [
        f"pyproject.toml::{GOOD}::tokens",
        f"pyproject.toml::{WRONG}::tokens",
    ]


@pytest.mark.slow
def test_k_runs_only_what_it_selects(project: pytest.Pytester) -> None:
    by_path = project.runpytest(*plugin_args(), "-k", "wrong and dummy")
    assert by_path.ret == pytest.ExitCode.TESTS_FAILED
    by_path.assert_outcomes(failed=1, deselected=26)


def test_two_shards_together_collect_every_port_once(project: pytest.Pytester) -> None:
    shards = [
        collected(
            project.runpytest(
                *plugin_args(), "--collect-only", "-q", f"--mmport-shard={k}/2"
            )
        )
        for k in (1, 2)
    ]
    assert sorted(shards[0] + shards[1]) == sorted(
        f"pyproject.toml::{port}::{check}"
        for port in (GOOD, WRONG, OTHER)
        for check in CHECKS
    )
    # Without recorded durations: round robin over the sorted labels.
    assert [ports_of(shard) for shard in shards] == [{GOOD, WRONG}, {OTHER}]


@pytest.mark.slow
def test_two_shards_together_run_every_port_once(project: pytest.Pytester) -> None:
    cases, codes = [], []
    for index in (1, 2):
        junit = project.path / f"shard{index}.xml"
        codes.append(
            project.runpytest(
                *plugin_args(), f"--mmport-shard={index}/2", f"--junitxml={junit}"
            ).ret
        )
        cases.append(junit_cases(junit))
    first, second = ({port for port, _ in shard} for shard in cases)
    assert first.isdisjoint(second) and first | second == {GOOD, WRONG, OTHER}
    assert len(cases[0]) + len(cases[1]) == 3 * len(CHECKS)
    assert codes == [pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.OK]


def test_recorded_durations_balance_the_shards(project: pytest.Pytester) -> None:
    (project.path / ".mmport_durations.json").write_text(
        json.dumps({GOOD: 50.0, WRONG: 10.0, OTHER: 10.0})
    )
    shards = [
        ports_of(
            collected(
                project.runpytest(
                    *plugin_args(), "--collect-only", "-q", f"--mmport-shard={k}/2"
                )
            )
        )
        for k in (1, 2)
    ]
    assert shards == [{GOOD}, {WRONG, OTHER}]
    bad = project.runpytest(*plugin_args(), "--collect-only", "--mmport-shard=3/2")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and "is not K/N" in bad.stderr.str()


def test_a_broken_manifest_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("[tool.mmport]\nports = []\n")
    result = pytester.runpytest(*plugin_args(), "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "non-empty list 'ports'" in result.stderr.str()


def test_the_ci_doc_matrix_runs_one_shard_per_machine() -> None:
    yaml = pytest.importorskip("yaml")
    block = re.search(
        r"```yaml\n(# \.github/workflows/mmport-pytest\.yml.*?)```",
        (ROOT / "docs" / "ci.md").read_text(),
        re.DOTALL,
    )
    assert block, "docs/ci.md lost its pytest matrix workflow"
    job = yaml.safe_load(block.group(1))["jobs"]["ports"]
    shards = job["strategy"]["matrix"]["shard"]
    run = next(
        step["run"] for step in job["steps"] if "--mmport-shard" in step.get("run", "")
    )
    assert shards == list(range(1, len(shards) + 1))
    assert (
        f"--mmport-shard ${{{{ matrix.shard }}}}/{len(shards)}" in run
        and "--junitxml" in run
        and "-n 2 --dist loadscope" in run
    )


@pytest.mark.parametrize(
    ("durations", "expected"),
    [
        ({}, [["a", "c"], ["b", "d"]]),  # round robin by sorted label
        ({"a": 9.0, "b": 1.0, "c": 1.0, "d": 1.0}, [["a"], ["b", "c", "d"]]),
        (
            {"a": 4.0, "b": 1.0},
            [["a", "b"], ["c", "d"]],
        ),  # ports not timed count as the mean of those timed
    ],
)
def test_shard_split(durations: dict[str, float], expected: list[list[str]]) -> None:
    labels = ["d", "c", "b", "a"]
    shards = [sorted(shard_labels(labels, Shard(k, 2), durations)) for k in (1, 2)]
    assert shards == expected


@pytest.mark.slow
def test_two_xdist_workers_give_the_same_items_and_outcomes(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The workers are fresh interpreters: they must import this checkout's mmport.
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    junit, pages = project.path / "junit.xml", project.path / "pages"
    # Each worker leaves a file at interpreter exit, which a worker ending quickly never reaches.
    at_exit = project.path / "exits"
    at_exit.mkdir()
    project.makeconftest(
        "import atexit, os\n"
        "def pytest_configure(config):\n"
        "    if hasattr(config, 'workerinput'):\n"
        f"        atexit.register(lambda: open(os.path.join({str(at_exit)!r}, str(os.getpid())), 'w').close())\n"
    )
    result = project.runpytest_subprocess(
        *plugin_args(),
        "-n",
        "2",
        "--dist",
        "loadscope",
        f"--junitxml={junit}",
        f"--mmport-html={pages}",
        timeout=600,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(
        passed=27 - len(WRONG_FAILS) - 3 * len(SKIPPED),
        failed=len(WRONG_FAILS),
        skipped=3 * len(SKIPPED),
    )
    cases = junit_cases(junit)
    assert len(cases) == 3 * len(CHECKS)
    assert {
        (port, check)
        for (port, check), outcome in cases.items()
        if outcome == "failure"
    } == {(WRONG, check) for check in WRONG_FAILS}
    # Each port's outcome came back from its worker: the controller wrote its page.
    index = (pages / "index.html").read_text()
    assert "2 / 3 ports pass" in index and len(re.findall(r'<a href="', index)) == 3
    # Every result came back although no worker went through Python's shutdown.
    assert list(at_exit.iterdir()) == []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("os._exit(7)", "the worker verifying this port died"),
        ("time.sleep(60)", "the worker verifying this port hung: over 1 s"),
    ],
)
def test_a_port_that_ends_its_worker_is_not_verified_again(
    tmp_path: Path, body: str, why: str
) -> None:
    """A worker marks the port it verifies; the fresh one xdist starts finds the mark and says why."""
    script = (
        "import os, time\n"
        "from pathlib import Path\n"
        "from mmport.testing.worker import WorkerGuard\n"
        f"with WorkerGuard(Path({str(tmp_path)!r}), 1, time_limit=1).watching('port'):\n"
        f"    {body}\n"
    )
    ended = _run_python(script)
    assert ended.returncode != 0, ended.stderr
    guard = WorkerGuard(tmp_path, 1, time_limit=1)
    assert (guard.died_on("port") or "").startswith(why)
    assert guard.died_on("another port") is None
    # Outside an xdist worker there is nothing to guard.
    assert WorkerGuard(None, 1).died_on("port") is None


@pytest.mark.parametrize("full_exit", [False, True])
def test_a_worker_ends_without_python_shutdown_unless_asked(
    project: pytest.Pytester, tmp_path: Path, full_exit: bool
) -> None:
    """The controller asks each xdist worker to skip the interpreter's shutdown; ``--mmport-full-exit`` keeps it."""
    args = ["--co", "-q", *(["--mmport-full-exit"] if full_exit else [])]
    config = project.parseconfigure(*args)
    node = type("WorkerNode", (), {"workerinput": {}})()
    config.pluginmanager.get_plugin("mmport-manifest").pytest_configure_node(node)
    guard = WorkerGuard.of(
        type("WorkerConfig", (), {"workerinput": node.workerinput})()
    )
    assert guard.quick_exit is not full_exit
    # What a quick end skips: the handlers Python runs at exit.
    marker = tmp_path / "exited"
    script = (
        "import atexit\n"
        "from mmport.testing.worker import WorkerGuard\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
        f"WorkerGuard(None, 1, quick_exit={guard.quick_exit}).end()\n"
    )
    ended = _run_python(script)
    assert ended.returncode == 0, ended.stderr
    assert marker.exists() is full_exit


def test_after_a_crash_only_unfinished_ports_are_queued_again() -> None:
    """xdist's loadscope queues every port a dead worker held; a finished one would stall a fresh worker."""
    from collections import OrderedDict
    from types import SimpleNamespace

    queue = OrderedDict(
        [
            ("pyproject.toml::done.py", {"pyproject.toml::done.py::tokens": True}),
            ("pyproject.toml::killer.py", {"pyproject.toml::killer.py::tokens": False}),
        ]
    )
    drop_finished_units(SimpleNamespace(workqueue=queue))
    assert list(queue) == ["pyproject.toml::killer.py"]
    drop_finished_units(SimpleNamespace())  # a scheduler without a queue of units
