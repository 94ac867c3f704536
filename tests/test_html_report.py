"""verify --html: the page a reviewer opens, from real verifies of a right and a wrong LLaVA port.

Fast tests read the page's HTML; the ``browser`` test renders it in headless
Chromium and asserts on the DOM it built and the pixels it drew.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import mutated_port

from mmport.sources import resolve
from mmport.verify import Report, verify_port
from mmport.verify.curves import sweep
from mmport.verify.html import render_html
from mmport.verify.reference import HFReference
from mmport.verify.report import CheckResult, Failure
from mmport.verify.svgplot import HF_COLOUR, PORT_COLOUR, nice_ticks

CHROMIUM = Path("/usr/bin/chromium")
# LLaVA's count, one too many: the port's curve runs parallel to HF's, one above.
OFF_BY_ONE = (
    "        return num_image_tokens\n",
    "        return num_image_tokens + 1\n",
)


def _verify(port: Path) -> Report:
    return verify_port("llava", port, probes=6, settings_per_modality=1, curves=True)


@pytest.fixture(scope="module")
def wrong(scaffolded, tmp_path_factory) -> Report:
    """A verify of LLaVA's port with its count off by one, count curves included."""
    return _verify(
        mutated_port(
            scaffolded("llava"), "llava", *OFF_BY_ONE, tmp_path_factory.mktemp("wrong")
        )
    )


@pytest.fixture(scope="module")
def right(scaffolded) -> Report:
    """A verify of the generated LLaVA port as it is."""
    return _verify(scaffolded("llava") / "llava_processing.py")


def _first_token_failure(report: Report) -> Failure:
    return report.checks["tokens"].failures[0]


def _section(page: str, css_class: str) -> str:
    """The text of the first ``<section class=css_class>``, tags stripped."""
    match = re.search(rf'<section class="{css_class}">(.*?)</section>', page, re.S)
    assert match, f"no {css_class} section in the page"
    return re.sub(r"<[^>]+>", "", match.group(1))


def test_report_records_the_token_window_around_the_first_difference(wrong) -> None:
    failure = _first_token_failure(wrong)
    window = wrong.token_windows[failure.probe]
    index = window.position - window.start
    assert window.position == failure.position
    assert (str(window.hf[index]), str(window.port[index])) == (
        failure.expected,
        failure.actual,
    )
    assert window.hf[:index] == window.port[:index], (
        "the window starts before the first difference"
    )
    assert len(window.hf_tokens) == len(window.hf), "HF's tokenizer spells every id"
    assert '"token_windows"' in wrong.to_json() and '"curves"' in wrong.to_json()


def test_curves_show_the_wrong_count_at_every_size(wrong) -> None:
    curve = wrong.curves["image"]
    assert len(curve.points) > 10 and len({p.group for p in curve.points}) > 1
    # The mutation adds one to whatever HF counts, at every size and shape.
    assert all(p.port == p.hf + 1 for p in curve.points), curve.points
    # HF's count in the curve is HF's count for that item alone (a few, asked of HF again).
    hf = HFReference(resolve("llava"))
    swept = sweep("image")
    assert [p.item for p in curve.points] == [item.describe() for _, _, item in swept]
    for (_, _, item), point in list(zip(swept, curve.points))[::8]:
        assert hf.item_count(item) == point.hf, item


def test_page_names_the_first_difference(wrong) -> None:
    failure = _first_token_failure(wrong)
    said = _section(render_html(wrong), "first-diff")
    assert f"probe {failure.probe}" in said
    assert f"token position {failure.position}" in said
    assert f"HF {failure.expected}" in said and f"port {failure.actual}" in said


def test_page_shows_token_windows_side_by_side(wrong) -> None:
    failure = _first_token_failure(wrong)
    page = render_html(wrong)
    first = re.search(r'<tr class="first">(.*?)</tr>', page, re.S)
    assert first, "the first differing position is highlighted"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", first.group(1))
    assert (
        cells[0].startswith(str(failure.position))
        and failure.expected in cells
        and failure.actual in cells
    )


def test_page_plots_hf_and_port_with_the_difference_marked(wrong) -> None:
    page = render_html(wrong)
    curve = wrong.curves["image"]
    assert page.count('<svg class="count-plot"') == len({p.group for p in curve.points})
    assert page.count('class="hf-point"') == len(curve.points)
    assert page.count('class="port-point"') == sum(
        p.port is not None for p in curve.points
    )
    assert page.count('class="mismatch"') == len(curve.mismatches()) > 0
    assert ">HF</text>" in page and ">port</text>" in page  # the legend


def test_page_lists_failing_probes_with_their_sizes(wrong) -> None:
    failure = _first_token_failure(wrong)
    section = render_html(wrong).split("<h2>Failing probes</h2>", 1)[1]
    for item in wrong.probe_items[failure.probe]:
        assert f"{item.width} × {item.height}" in section


def test_passing_port_page_has_no_difference(right) -> None:
    page = render_html(right)
    assert right.passed and 'class="verdict pass">PASS' in page
    assert 'class="first-diff"' not in page and 'class="mismatch"' not in page
    assert (
        all(not curve.mismatches() for curve in right.curves.values()) and right.curves
    )


def test_page_escapes_what_it_shows() -> None:
    checks = {
        "tokens": CheckResult(
            "tokens",
            1,
            [
                Failure(
                    "<p>", "<script>alert(1)</script>", 0, "<b>", "&", loudness="silent"
                )
            ],
        )
    }
    page = render_html(Report("<img src=x>", "port.py", "bundled", 1, 0, checks))
    assert (
        "<script>alert" not in page
        and "<img src=x>" not in page
        and "&lt;script&gt;" in page
    )


def test_nice_ticks_are_round_and_cover_the_data() -> None:
    assert nice_ticks(0, 9) == [0, 5, 10]
    assert nice_ticks(0, 1250) == [0, 500, 1000, 1500]
    assert nice_ticks(575, 578, min_step=1) == [575, 576, 577, 578]


def _chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]  # fmt: skip
    return subprocess.run(
        [str(CHROMIUM), *flags, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def _drawn_in(pixels, colour: str, within: int = 24) -> int:
    """How many pixels are near ``colour`` (``#rrggbb``) in every channel."""
    wanted = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels.astype(int) - wanted) <= within).all(axis=-1).sum())


@pytest.mark.browser
@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless Chromium is not installed at /usr/bin/chromium (apt-get install chromium)",
)
def test_page_renders_in_headless_chromium(wrong, tmp_path) -> None:
    from PIL import Image

    page = tmp_path / "report.html"
    page.write_text(render_html(wrong), encoding="utf-8")
    dom = _chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr
    # The DOM Chromium built: plots with both series, and the first difference named.
    failure = _first_token_failure(wrong)
    said = re.sub(
        r"<[^>]+>",
        "",
        re.search(
            r'<section class="first-diff">(.*?)</section>', dom.stdout, re.S
        ).group(1),
    )
    assert (
        f"token position {failure.position}" in said
        and f"HF {failure.expected}" in said
    )
    assert len(re.findall(r'<circle class="hf-point"', dom.stdout)) == len(
        wrong.curves["image"].points
    )
    assert re.search(r'<path class="port-point"', dom.stdout)
    # What it drew: the plots' HF blue and port orange, and the red FAIL, on a page of many colours.
    png = tmp_path / "report.png"
    shot = _chromium(
        f"--screenshot={png}",
        "--window-size=1200,2000",
        page.as_uri(),
        tmp_path=tmp_path,
    )
    assert shot.returncode == 0 and png.exists(), shot.stderr
    pixels = np.asarray(Image.open(png).convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50, "the screenshot is blank"
    for colour in (HF_COLOUR, PORT_COLOUR, "#cf222e"):
        assert _drawn_in(pixels, colour) > 100, f"nothing drawn in {colour}"
