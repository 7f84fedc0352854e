"""The report opened in a real headless Chromium (the system's, ``/usr/bin/chromium``), checked from the live DOM.

One report holds the NeMo Gym examples (built with ``--attach``), the producer samples (built) and
``fixtures/views/parallel_subagent.jsonl`` (see ``tests/test_views.py`` for what it holds). Every
request the page makes is recorded: only ``file:``, ``data:`` and ``blob:`` are allowed. A
screenshot of the opened rollout is written under the test's temporary folder for a person to look at.

Without ``/usr/bin/chromium`` these tests skip, saying so; under ``NG_TRAJ_REQUIRE_SHARED=1``
(``.ci/run``, which installs Chromium) they fail instead.
"""

from __future__ import annotations

import os
import sys

import pytest

from conftest import FIXTURES, ROOT, run_cli, shared_dir
from ng_traj.views.meanings import CRITERIA_MEANINGS, gap_meaning

sys.path.insert(0, str(ROOT / "bench"))
from report_open import CHROMIUM, LOCAL_SCHEMES, launch, measure, open_report

PARALLEL = FIXTURES / "views" / "parallel_subagent.jsonl"


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is absent (apt-get install -y chromium): the report is not opened in a browser"
        if os.environ.get("NG_TRAJ_REQUIRE_SHARED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of the samples and the fixture, and how many rollouts it holds."""
    folder = tmp_path_factory.mktemp("report")
    gym, samples = folder / "gym.jsonl", folder / "samples.jsonl"
    for source, out, extra in (
        (shared_dir("gym-examples"), gym, ("--attach",)),
        (shared_dir("producer-samples"), samples, ()),
    ):
        built = run_cli("build", source, *extra, "-o", out)
        assert built.exit_code == 0, built.stderr
    count = sum(len(path.read_bytes().splitlines()) for path in (gym, samples, PARALLEL))
    page = folder / "report.html"
    result = run_cli("report", gym, samples, PARALLEL, FIXTURES / "matrix" / "rows.jsonl", "-o", page,
                     "--compare", gym)  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return page, count + 5


@pytest.fixture
def page(browser, report):
    tab = browser.new_page(viewport={"width": 1400, "height": 900})
    tab.requests, tab.errors = [], []
    tab.on("request", lambda request: tab.requests.append(request.url))
    tab.on("pageerror", lambda error: tab.errors.append(str(error)))
    open_report(tab, report[0])
    yield tab
    assert [url for url in tab.requests if not url.startswith(LOCAL_SCHEMES)] == []
    assert tab.errors == []
    tab.close()


def _open(page, task_id: str) -> None:
    index = page.evaluate("(task) => ROLLOUTS.find((r) => r.task_id === task).i", task_id)
    page.locator(f"#list tbody tr[data-i='{index}']").click()
    page.wait_for_selector(".timeline")


def test_the_list_holds_every_rollout_and_the_filters_narrow_it(page, report):
    assert page.locator("#list tbody tr").count() == report[1]
    assert page.locator("#count").inner_text() == f"{report[1]} of {report[1]} rollouts"
    page.select_option("#f-agent", "anyswe_pi")
    assert page.locator("#list tbody tr").count() == 5
    page.select_option("#f-reward", "pos")
    rewards = page.locator("#list tbody tr td:nth-child(5)").all_inner_texts()
    assert rewards and all(float(text) > 0 for text in rewards)
    page.select_option("#f-agent", "")
    page.select_option("#f-reward", "")
    page.fill("#search", "task-1")
    assert page.locator("#list tbody tr").count() == 1
    page.fill("#search", "")
    page.select_option("#f-gap", "tool_timing_unavailable")
    assert page.locator("#f-gap option:checked").get_attribute("title") == gap_meaning("tool_timing_unavailable")
    tasks = page.locator("#list tbody tr td:nth-child(2)").all_inner_texts()
    assert "task-1" in tasks
    page.select_option("#f-status", "completed")
    assert page.locator("#list tbody tr").count() >= 1


def test_a_timeline_shows_parallel_tool_bars_overlapping_and_the_sub_agent_nested(page, tmp_path):
    _open(page, "task-1")
    root = page.locator(".tl-row[data-invocation='root']")
    boxes = {
        bar.get_attribute("title").split(":")[0]: bar.bounding_box()
        for bar in root.locator(".bar[data-kind='tool']").all()
    }
    a, b = boxes["tool bash call_a"], boxes["tool bash call_b"]
    spawn = boxes["tool delegate call_spawn"]
    assert a["x"] < b["x"] < a["x"] + a["width"]  # call_b starts while call_a runs: drawn overlapping
    assert a["y"] != b["y"] != spawn["y"]  # each in its own lane
    child = page.locator(".tl-row.subagent[data-invocation='root.child']")
    assert child.get_attribute("data-depth") == "1"
    assert "spawned by call_spawn" in child.inner_text()
    helper = child.locator(".bar[data-kind='model']").bounding_box()
    assert spawn["x"] < helper["x"] < spawn["x"] + spawn["width"]  # inside the spawning call's time
    untimed = page.locator(".untimed[data-kind='tool']").first
    assert untimed.inner_text() == "no time: tool read"
    gaps = page.locator("#gaps").inner_text()
    assert f"tool_timing_unavailable ×1: {gap_meaning('tool_timing_unavailable')}" in gaps
    assert "root.child: call_c" in gaps
    request = page.locator("details.request").first
    request.evaluate("element => { element.open = true; }")
    text = request.inner_text()
    assert "System prompt\nYou are a careful agent." in text and "Tool definitions (2)" in text
    assert "policy_model" in page.inner_text("#detail")  # totals per role
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot: {shot}")


def test_a_claude_code_tool_call_shows_the_completion_time_it_has(page):
    """Its tool results give a completion and no start: 'no time recorded' was said of them."""
    index = page.evaluate("() => ROLLOUTS.find((r) => r.rollout_id === '8a283a61-e3f0-4e8f-ba06-6711e2fcf2ed').i")
    page.locator(f"#list tbody tr[data-i='{index}']").click()
    page.wait_for_selector(".timeline")
    tool = page.locator("li", has_text="toolu_c20e391b57a640c1ac962594").last
    assert tool.locator(".untimed").inner_text() == "completed 2026-06-13T07:26:48.376Z; no start recorded"


def test_a_rebuilt_gym_rollout_shows_its_conversation_and_gaps(page):
    index = page.evaluate("ROLLOUTS.find((r) => r.agent === 'anyswe_pi' && r.rollout_id === '0-0').i")
    page.evaluate("(i) => { location.hash = 'r=' + i; }", index)
    page.wait_for_selector(".timeline")
    detail = page.inner_text("#detail")
    assert "No call states a time" in detail
    assert "conversation_from_rollout_record ×1" in detail
    assert page.locator("#detail details summary").first.inner_text().startswith("rollout_record: ")


def test_the_matrix_page_explains_the_cells_and_compare_sets_builds_side_by_side(page):
    page.click("nav button[data-page='matrix']")
    matrix = page.inner_text("#page-matrix")
    assert CRITERIA_MEANINGS["C6"] in matrix and "V 0 · O 0 · X 5 · n/a 0" in matrix
    assert "pi_agent_run" in matrix
    page.click("nav button[data-page='compare']")
    compare = page.locator("#page-compare tbody tr, #page-compare tr").count()
    assert compare > 70
    assert "absent" in page.inner_text("#page-compare")  # the producer samples are only in A


def test_the_benchmark_measures_a_small_report(browser, report, tmp_path):
    result = measure(browser, report[0], 1, "1-0", tmp_path / "shot.png")
    assert result["rollouts"] == report[1] and result["requests_outside"] == []
    assert 0 < result["time_to_list_s"] <= result["wall_s"]
    assert (tmp_path / "shot.png").stat().st_size > 10_000
