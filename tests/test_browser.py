"""The report pages in a real browser: headless Chromium driven through the DevTools protocol
(tests/browser.py). A small sweep's page, its points' pages and ``harness trace``'s page of the
H100 fixture and ``harness history``'s page of ten nights (tests/fixtures/history), each at 1400
and 1024 px wide: every image loads, nothing is requested from the network, no console error,
and nothing is wider than the window at 1024 px. The screenshots are kept (``SCREENSHOTS``) for
a person to look at.

Where no browser is installed the tests are skipped, except under CI (``CI=true``), where that
is a failure: ``.ci/run`` installs Chromium.
"""
import contextlib
import io
import os
import textwrap
from pathlib import Path

import browser
import pytest

from harness import cli

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "h100" / "llama_train-100m"
HISTORY = REPO / "tests" / "fixtures" / "history"  # ten nights of three points
SCREENSHOTS = Path(os.environ.get("HARNESS_SCREENSHOTS", REPO / "results" / "screenshots"))
WIDTHS = (1400, 1024)
NARROW = 1024

# Two collective points and a matmul, tiny, predicted for a book chip (no CPU calibration).
SWEEP = """
    name = "browser"
    description = "Two all-gathers and a matmul, tiny: the browser test's sweep."
    steps = 2
    warmup = 1
    chip = "tpu-v5e"
    [[grid]]
    workload = "collective"
    mesh = "8"
    [grid.set]
    kind = "all_gather"
    nbytes = [4096, 65536]
    [[grid]]
    workload = "matmul"
    mesh = "4x2"
    [grid.set]
    case = "allgather"
    """


def _chromium() -> str:
    found = browser.find()
    if found is None:
        why = f"no browser on PATH (tried {', '.join(browser.CANDIDATES)})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}: CI must test the pages in one (.ci/run installs chromium)")
        pytest.skip(f"{why}: apt-get install chromium")
    return found


def _harness(*argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main([str(a) for a in argv]) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """name -> report page: the sweep's, a collective point's, the matmul point's, the trace's."""
    _chromium()
    d = tmp_path_factory.mktemp("pages")
    sweep_file = d / "browser.toml"
    sweep_file.write_text(textwrap.dedent(SWEEP).lstrip())
    _harness("sweep", sweep_file, "--out", d / "sweeps")
    (sweep_dir,) = (d / "sweeps").iterdir()
    points = sorted((sweep_dir / "runs").glob("*/*/report.html"))
    _harness("trace", FIXTURE, "--html", d / "trace.html")
    _harness("history", HISTORY, "--html", d / "history.html")
    return {"sweep": sweep_dir / "report.html",
            "collective": next(p for p in points if "/collective-" in str(p)),
            "matmul": next(p for p in points if "/matmul-" in str(p)),
            "trace": d / "trace.html", "history": d / "history.html"}


@pytest.fixture(scope="module")
def opened(pages) -> dict[tuple[str, int], browser.Page]:
    """(page, width) -> what the browser made of it; each screenshot kept in SCREENSHOTS."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    out = {}
    with browser.Browser(_chromium()) as b:
        for name, path in pages.items():
            for width in WIDTHS:
                page = b.open_page(path, width)
                (SCREENSHOTS / f"{name}-{width}.png").write_bytes(page.screenshot)
                out[name, width] = page
    return out


# the plots each page shows: the sweep's two, the matmul point's step, roofline and categories,
# the collective point's step (one op without FLOPs and one category: nothing else to draw),
# the trace's three, the history's one trend plot per point
IMAGES = {"sweep": 2, "collective": 1, "matmul": 3, "trace": 3, "history": 3}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(IMAGES))
def test_page_renders_alone_with_its_plots(opened, name, width):
    page = opened[name, width]
    assert page.network == [], f"{name} asked the network for {page.network}"
    assert page.errors == [], f"{name}: {page.errors}"
    assert page.images == IMAGES[name] and page.broken == [], (page.images, page.broken)
    assert page.screenshot.startswith(b"\x89PNG") and len(page.screenshot) > 10_000


@pytest.mark.parametrize("name", list(IMAGES))
def test_page_fits_1024_px(opened, name):
    page = opened[name, NARROW]
    assert page.scroll_width <= NARROW and page.overflow == [], (
        f"{name} at {NARROW} px: {page.scroll_width} px wide; past the edge: {page.overflow}")


def test_the_checks_catch_a_page_that_breaks_them(tmp_path):
    """The probes can fail: a page that asks the network, logs an error, has a broken image
    and a table wider than the window is caught on each count."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><html><body>"
                   "<img alt=missing src='missing.png'>"
                   "<img alt=remote src='http://example.invalid/x.png'>"
                   "<script>console.error('boom')</script>"
                   "<div style='width:1500px'>wide</div></body></html>")
    with browser.Browser(_chromium()) as b:
        page = b.open_page(bad, NARROW)
    assert page.network == ["http://example.invalid/x.png"]
    assert any("boom" in e for e in page.errors)
    assert set(page.broken) == {"missing", "remote"}
    assert page.scroll_width > NARROW and page.overflow == ["div right=1508"]  # 8 px margin
