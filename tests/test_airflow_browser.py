"""The topology UI in a real browser: headless Debian Chromium (launched by path through
Playwright; no browser download) against the session's live Airflow (``airflow_live``: api-server,
scheduler, dag-processor, triggerer on loopback) and a real LocalCluster run published to the
session's Redis.

Screenshots go to the test's tmp dir and build/screenshots/ (kept after the run); with ``TOPOLOGY_SCREENSHOTS_DIR`` set (docs/screenshots.py)
they are also written there, from a longer run so the chart has a few minutes' worth of shape.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import redis

from state.checkpoint import COMMITTING, CheckPointState, save_checkpoint
from state.layout import REGISTRY, ctl_key
from state.transactional import current_key
from topology_runtime import LocalCluster

pytestmark = pytest.mark.slow  # a live Airflow and Chromium: not in make test-fast

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
NAME = "wordcount-demo"
SCREENSHOTS = os.environ.get("TOPOLOGY_SCREENSHOTS_DIR")
RUN_SHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"


@pytest.fixture(scope="module")
def run(redis_server):
    """A finished real run of a small topology (errors and replays included), a checkpoint
    record and a transactional txid where the runtime keeps them."""
    from test_airflow_ui import topology

    url = redis_server.url
    client = redis.Redis.from_url(url, decode_responses=True)
    # docs: a longer run, so the chart shows a series rather than two points
    n, sleep = (6000, 0.004) if SCREENSHOTS else (400, 0.005)
    with LocalCluster(workers=2, redis_url=url) as cluster:
        result = cluster.run(NAME, topology(n), {"test.redis.url": url, "test.key": "browser",
                                                 "test.sleep": sleep}, timeout=300)
    assert result.state == "completed"
    save_checkpoint(client, NAME, CheckPointState(42, COMMITTING))
    client.set(current_key(NAME), 9)
    yield client
    for k in client.keys(f"topology:{{{NAME}:*"):
        client.delete(k)
    client.zrem(REGISTRY, NAME)
    client.delete("browser:raised")


@pytest.fixture
def page(tmp_path):
    """A fresh headless Chromium profile and page (1400x900)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: apt-get install chromium (see .ci/run)"
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900})
        ctx.set_default_timeout(30_000)
        try:
            yield ctx.pages[0] if ctx.pages else ctx.new_page()
        finally:
            ctx.close()


def _shot(target, tmp_path: Path, name: str, **kw) -> Path:
    """Every run keeps its screenshots in build/screenshots/ (CI's too: what the pages looked like
    when the suite passed or failed); docs/screenshots.py also copies them to docs/img."""
    path = tmp_path / name
    target.screenshot(path=str(path), **kw)
    for out in (RUN_SHOTS, *([Path(SCREENSHOTS)] if SCREENSHOTS else [])):
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / name)
    return path


def _login(page, live) -> None:
    page.fill("input[name=username]", live.username)
    page.fill("input[name=password]", live.password)
    page.get_by_role("button", name="Sign in").click()


def _cell(scope, component: str, field: str) -> int:
    text = scope.locator(f'td[data-testid="{field}"][data-component="user:{component}"]').inner_text()
    return int(text.replace(",", ""))


def test_browser_login_topology_pages_and_trigger_form(airflow_live, run, page, tmp_path):
    live = airflow_live
    status = json.loads(run.get(ctl_key(NAME, "status")))

    # 1. Not logged in: the status app sends the browser to Airflow's login page, and back.
    page.goto(f"{live.base_url}/topologies/topology/{NAME}")
    page.wait_for_url(re.compile(r"/auth/login"))
    _login(page, live)
    page.wait_for_url(re.compile(rf"/topologies/topology/{NAME}"))
    assert page.locator('[data-testid="topology-name"]').inner_text() == NAME

    # 2. The topology page shows what Redis holds.
    assert page.locator('[data-testid="state"]').first.inner_text() == status["state"] == "completed"
    for comp, stats in status["components"].items():
        for field in ("tasks", "emitted", "acked", "failed", "replayed", "executed"):
            assert _cell(page, comp, field) == stats[field], (comp, field)
    assert page.locator('[data-testid="checkpoint-txid"]').inner_text() == "42"
    assert page.locator('[data-testid="checkpoint-phase"]').inner_text() == "COMMITTING"
    assert page.locator('[data-testid="tx-current"]').inner_text() == "9"
    assert page.locator("svg polyline").count() >= 2
    # The drawing: a box per component with its live count, an edge per subscription, each bolt
    # coloured by the capacity the run recorded.
    from topology_airflow.graph import UNMEASURED, capacity_colour

    graph = page.locator('[data-testid="topology-graph"]')
    for comp, stats in status["components"].items():
        box = graph.locator(f'g[data-component="{comp}"]')
        assert box.count() == 1, comp
        count = stats["emitted"] if comp == "numbers" else stats["executed"]
        assert f"{count:,}" in box.text_content(), (comp, box.text_content())
        if comp != "numbers":  # every bolt was measured: a colour and its capacity, never the grey
            fill = box.locator("rect").get_attribute("fill")
            assert stats["capacity"] is not None and fill == capacity_colour(stats["capacity"]) != UNMEASURED, comp
            assert f"capacity {stats['capacity']:.2f}" in box.text_content(), (comp, box.text_content())
        else:
            assert box.locator("rect").get_attribute("fill") == UNMEASURED and "capacity" not in box.text_content()
    assert graph.locator('g[data-edge="numbers->double"]').count() == 1
    assert graph.locator('g[data-edge="double->sink"]').count() == 1
    assert "shuffle" in graph.locator('g[data-edge="double->sink"]').text_content()
    _shot(graph, tmp_path, "topology-graph.png")
    assert page.locator("tr[data-worker]").count() == len(status["workers"])
    assert page.locator('[data-testid="error"]').count() == min(20, len(status["errors"]))
    _shot(page, tmp_path, "topology.png", full_page=True)

    # 3. The Airflow UI's navigation view: the topology list inside Airflow, same session.
    page.goto(f"{live.base_url}/plugin/topologies")
    frame = page.frame_locator("iframe").first
    row = frame.locator(f'tr[data-topology="{NAME}"]')
    row.wait_for()
    # the spouts' tuples (tuple trees), not every component's sum: here the "numbers" spout's
    total = {k: status["components"]["numbers"][k] for k in ("emitted", "acked", "failed")}
    assert total["acked"] == (6000 if SCREENSHOTS else 400)  # the run's spout tuples (fixture above)
    for field, value in total.items():
        assert int(row.locator(f'td[data-testid="{field}"]').inner_text().replace(",", "")) == value, field
    _shot(page, tmp_path, "topology-list.png")
    page.get_by_role("button", name="Browse").click()  # the view is listed in Airflow's Browse menu
    assert page.get_by_role("menuitem", name="Topologies").is_visible()
    page.keyboard.press("Escape")

    # 4. The trigger form of the recovery DAG (opened, not submitted: this test changes nothing).
    live.wait_for_dag("topology_recovery")
    page.goto(f"{live.base_url}/dags/topology_recovery")
    page.get_by_role("button", name=re.compile("^Trigger")).first.click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    dialog.get_by_text("Run Parameters").wait_for()
    text = dialog.inner_text()  # rendered text only
    for label in ("Topology id", "Action", "Dry run", "Report only; change nothing"):
        assert label in text, label
    # The topology_id param's field: empty (no id is pre-filled: the form would act on whatever it
    # names), set to this run's name (not submitted).
    inputs = dialog.locator("input[type=text], input:not([type])")
    assert not any(inputs.nth(i).input_value() == "wordcount" for i in range(inputs.count()))
    field = next(inputs.nth(i) for i in range(inputs.count()) if inputs.nth(i).input_value() == "")
    field.fill(NAME)
    assert field.input_value() == NAME
    page.wait_for_timeout(500)  # the dialog's opening animation
    _shot(page, tmp_path, "trigger-form.png")
    for name in ("topology.png", "topology-list.png", "trigger-form.png"):
        assert (tmp_path / name).stat().st_size > 10_000, name


def test_browser_dag_run_tab_lists_that_runs_topologies(airflow_live, run, page, tmp_path):
    """The DAG-run view: a dry-run recovery of the demo topology (reads only), then its run page's
    Topologies tab shows the list filtered to that DAG run."""
    live = airflow_live
    run_id = live.trigger("topology_recovery", {"topology_id": NAME, "action": "auto", "dry_run": True})
    assert live.wait_for_run("topology_recovery", run_id, timeout=180) == "success", \
        live.describe_run("topology_recovery", run_id)
    page.goto(f"{live.base_url}/auth/login")
    _login(page, live)
    page.wait_for_url(lambda url: "/auth/login" not in url)
    page.goto(f"{live.base_url}/dags/topology_recovery/runs/{run_id}")
    page.locator('a[href$="/plugin/topologies-of-run"]').click()  # the run page's "Topologies" tab
    iframe = page.locator("iframe").first
    iframe.wait_for()
    src = iframe.get_attribute("src") or ""
    assert "dag_id=topology_recovery" in src and "run_id=" in src, src
    frame = page.frame_locator("iframe").first
    frame.get_by_text("Started by DAG").wait_for()
    assert "topology_recovery" in frame.locator("body").inner_text()
    # that DAG run started no topology: the filtered list is empty, the demo run is not in it
    assert frame.locator('[data-testid="empty"]').count() == 1
    assert frame.locator(f'tr[data-topology="{NAME}"]').count() == 0
    _shot(page, tmp_path, "dag-run-tab.png")


def test_pages_fit_1280_px_and_chart_labels_lie_inside_the_chart(redis_url, page, monkeypatch, tmp_path):
    """Laid out by Chromium at 1280 px wide (no live Airflow needed: the pages as the app renders
    them from Redis): a run with long ids, component and host names, a long DAG run id and a
    112,066 tuples/s chart peak. Nothing overflows the page horizontally, every table fits its
    width, the long cells are cut with their text in a tooltip, and every label of both charts
    (the y labels above all) lies inside its SVG."""
    from test_airflow_ui import WIDE, plant_wide_run
    from topology_airflow.app import list_topologies, render_list, render_topology, topology_detail

    from topology_runtime.control.control_plane import ControlPlane

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    plant_wide_run(redis_url)
    plant_wide_run(redis_url, "short")
    control = ControlPlane(redis_url)
    pages = {"list": render_list("/topologies", list_topologies(control), None, None, False),
             "topology": render_topology("/topologies", topology_detail(control, WIDE), False)}
    page.set_viewport_size({"width": 1280, "height": 900})
    for which, html in pages.items():
        page.set_content(html)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1280, (which, width)
        tables = page.evaluate("""[...document.querySelectorAll('table')].map(t => {
            const r = t.getBoundingClientRect(), box = t.parentElement.getBoundingClientRect();
            return [t.dataset.testid, r.right, box.right, t.parentElement.scrollWidth, t.parentElement.clientWidth];
        })""")
        assert tables
        for testid, right, box_right, scroll_w, client_w in tables:
            assert right <= box_right + 0.5 and scroll_w <= client_w and right <= 1280 - 8, (which, testid, right)
        long_cell = f'span.t[title="{WIDE}"]' if which == "list" else 'span.t[title^="split-sentences-into-words-"]'
        cut = page.locator(long_cell).first
        assert cut.evaluate("e => e.scrollWidth > e.clientWidth"), "a long cell is cut, its text in the tooltip"
        page.screenshot(path=str(tmp_path / f"fit-{which}.png"), full_page=True)  # to look at when it fails
    # the topology page's charts: every text's box inside its SVG's box
    page.set_content(pages["topology"])
    boxes = page.evaluate("""[...document.querySelectorAll('svg')].map(svg => {
        const s = svg.getBoundingClientRect();
        return [svg.getAttribute('aria-label'), [s.left, s.top, s.right, s.bottom],
                [...svg.querySelectorAll('text')].map(t => {
                    const r = t.getBoundingClientRect();
                    return [t.textContent, r.left, r.top, r.right, r.bottom];
                })];
    })""")
    assert len(boxes) == 2
    for label, (left, top, right, bottom), texts in boxes:
        for text, tl, tt, tr, tb in texts:
            assert left <= tl and tr <= right and top <= tt and tb <= bottom, (label, text, (tl, tr), (left, right))
    throughput = next(texts for label, _, texts in boxes if label.startswith("Throughput"))
    y_labels = [t[0] for t in throughput][:3]
    assert y_labels == ["0", "60k", "120k"]
