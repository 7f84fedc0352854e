"""How long a report takes to open to an interactive rollout list, in headless Chromium.

    python bench/report_open.py --size-mb 2048 --calls 16        # generate, build, report, open
    python bench/report_open.py --corpus DIR                     # an existing retained run
    python bench/report_open.py --report report.html [--open ROLLOUT_ID] [--screenshot out.png]

The corpus (``bench/corpus.py``) is built with ``ng-traj build``, reported with ``ng-traj report``,
and the page is opened from ``file://`` in the system's Chromium (``/usr/bin/chromium``, driven by
Playwright; no browser is downloaded). Time to interactive list is from the start of navigation to
the moment the page's script has drawn the list and wired its filters (``body[data-ready]``), as
the page itself measures it (``performance.now()``), and as the wall clock here sees it. The
fastest of ``--repeat`` loads is reported, with every load, as one JSON line on standard output.
``--open`` shows one rollout's detail before the screenshot (the README's picture is made so).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LOCAL_SCHEMES = ("file:", "data:", "blob:")


def launch(playwright):
    """The system's Chromium, headless, with nothing of its own reaching the network."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def open_report(page, report: Path) -> dict[str, float]:
    """Load ``report`` in ``page`` until the list is interactive; the page's and the wall clock's seconds."""
    started = time.perf_counter()
    page.goto(report.resolve().as_uri(), wait_until="commit", timeout=600_000)
    page.wait_for_selector("body[data-ready='1']", timeout=600_000)
    wall = time.perf_counter() - started
    in_page = float(page.evaluate("document.body.dataset.readyMs")) / 1000
    return {"page_s": round(in_page, 3), "wall_s": round(wall, 3)}


def _ng_traj(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ng_traj", *args, "--quiet"], check=True)


def make_report(workdir: Path, args: argparse.Namespace) -> Path:
    """Generate (unless ``--corpus``), build and report the corpus; the report's path."""
    corpus = args.corpus
    if corpus is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from corpus import generate

        corpus = workdir / "corpus"
        size = int(args.size_mb * 1024 * 1024) if args.size_mb else None
        generate(corpus, rollouts=None if size else args.rollouts, calls=args.calls, seed=args.seed, size_bytes=size)
    built = workdir / "built.jsonl"
    _ng_traj("build", str(corpus), "-o", str(built))
    report = workdir / "report.html"
    _ng_traj("report", str(built), "-o", str(report))
    return report


def measure(browser, report: Path, repeat: int, rollout: str | None = None, screenshot: Path | None = None) -> dict:
    """Open ``report`` ``repeat`` times in fresh pages of ``browser``; the result line (with any request
    that left the page)."""
    loads, outside = [], []
    for _ in range(repeat):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("request", lambda r: r.url.startswith(LOCAL_SCHEMES) or outside.append(r.url))
        loads.append(open_report(page, report))
        rows = page.locator("#list tbody tr").count()
        if screenshot is not None:
            if rollout is not None:
                index = page.evaluate("(id) => ROLLOUTS.find((r) => r.rollout_id === id).i", rollout)
                page.evaluate("(i) => { location.hash = 'r=' + i; }", index)
                page.wait_for_selector(".timeline")
            page.screenshot(path=str(screenshot))
        page.close()
    best = min(loads, key=lambda load: load["page_s"])
    return {
        "report_bytes": report.stat().st_size,
        "rollouts": rows,
        "time_to_list_s": best["page_s"],
        "wall_s": best["wall_s"],
        "loads": loads,
        "requests_outside": outside,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--report", type=Path, help="an existing report to open")
    source.add_argument("--corpus", type=Path, help="an existing retained run to build and report")
    source.add_argument("--size-mb", type=float, help="generate a corpus of this size")
    parser.add_argument("--rollouts", type=int, default=50, help="rollouts to generate (without --size-mb)")
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--workdir", type=Path, help="where the corpus, build and report go (default: a temporary folder)"
    )
    parser.add_argument("--open", dest="rollout", help="show this rollout id before the screenshot")
    parser.add_argument("--screenshot", type=Path, help="write a PNG of the page (after the last load)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ng-traj-report-bench-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        report = args.report or make_report(workdir, args)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                result = measure(browser, report, args.repeat, args.rollout, args.screenshot)
            finally:
                browser.close()
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main()
