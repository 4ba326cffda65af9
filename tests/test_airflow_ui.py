"""The topology status app in Airflow's API server, through the real Airflow FastAPI app
(``airflow.api_fastapi.app.create_app``) with the real SimpleAuthManager and the session's Redis.

The data is real: a short LocalCluster run of a small topology (spout -> bolt -> bolt with a
planted bug) publishes its status, history and worker heartbeats through the control plane; a
checkpoint record and a transactional txid are planted where the runtime keeps them. No mocks.
"""

from __future__ import annotations

import json
import re
import time

import pytest
import redis
from fastapi.testclient import TestClient
from topology_airflow.pages import _num

from state.checkpoint import PREPARING, CheckPointState, save_checkpoint
from state.layout import REGISTRY, ctl_key
from state.transactional import current_key
from topology_runtime import Bolt, LocalCluster, TopologyBuilder
from topology_runtime.api.status import ComponentStats, RunStatus
from topology_runtime.control.control_plane import ControlPlane

NAME = "ui-numbers"
EVIL = "evil<script>alert(1)</script>"  # not a valid id: only found in the registry
EVIL_RUN = "evil-run"  # a valid id whose records carry markup
PASSWORD = "ui-test-password"
API = "/topologies/api/topologies"
PAGES = ["/topologies/", f"/topologies/topology/{NAME}"]
METRICS = "/topologies/metrics"
ENDPOINTS = PAGES + [API, f"{API}/{NAME}", METRICS]


class BuggyBolt(Bolt):
    """Raises once on every 100th number (the replay then succeeds): the run records errors
    with their tracebacks and the spout replays. ``test.sleep`` (5 ms) per tuple, so the run lasts
    a few of the supervisor's 2 s publish intervals and the chart has points."""

    outputs: list = []

    def prepare(self, conf, context):
        self.r = redis.Redis.from_url(conf["test.redis.url"])
        self.raised = f"{conf['test.key']}:raised"
        self.sleep = float(conf.get("test.sleep", 0.005))

    def execute(self, tup):
        time.sleep(self.sleep)
        if tup[0] % 100 == 0 and self.r.sadd(self.raised, tup[0]):
            raise ValueError(f"planted <bug> on {tup[0]}")
        self.ack(tup)


def topology(n: int = 400):
    """numbers (2 tasks) -> double (2) -> sink (2, BuggyBolt); also used by the browser test."""
    from topologies import BasicDouble, NumberSpout

    b = TopologyBuilder()
    b.set_spout("numbers", NumberSpout(n), parallelism=2)
    b.set_bolt("double", BasicDouble(), parallelism=2).shuffle_grouping("numbers")
    b.set_bolt("sink", BuggyBolt(), parallelism=2).shuffle_grouping("double")
    return b.create_topology()


WIDE = "wide-" + "w" * 60  # a long (valid) id, as some deployments name their runs
PEAK = 112_066.21  # tuples/s: the chart's top label must not be cut
SPOUT = {"emitted": 1_000_000, "acked": 990_000, "failed": 10_000}


def plant_wide_run(url: str, name: str = WIDE) -> None:
    """A finished run whose bolts ack far more than its spout emitted, with long cell values
    (id, component and host names, DAG run id, an error without spaces) and a chart history
    whose fastest interval is PEAK tuples/s: the samples the supervisor pushes, planted with
    their own times (100 s apart: integer counters give an exact rate)."""
    control = ControlPlane(url)
    token = control.register(name, "spark", 2, dag_id="nightly_wordcount_" + "x" * 40,
                             dag_run_id="manual__2026-11-25T04:48:10.327669+00:00", task_id="submit",
                             master="spark://spark-master-with-a-long-name.cluster.example.internal:7077")
    status = RunStatus(name, "completed", components={
        "sentences": ComponentStats(**SPOUT, replayed=10_000, tasks=4, complete_latency_p50_ms=12.5,
                                    complete_latency_p99_ms=880.0),
        "split-sentences-into-words-" + "s" * 40: ComponentStats(executed=1_010_000, emitted=5_000_000,
                                                                acked=1_000_000, failed=10_000, tasks=8,
                                                                execute_latency_ms=0.04),
        "count": ComponentStats(executed=5_000_000, acked=5_000_000, tasks=8, execute_latency_ms=0.02,
                                late=17, dropped=3),
    }, errors=[{"component": "count", "task": 3, "error": "ValueError: " + "x" * 300, "traceback": "Traceback"}])
    workers = {str(i): {"host": f"worker-host-with-a-long-name-{i}.cluster.example.internal", "pid": 4000 + i,
                        "incarnation": 1, "heartbeat_age_secs": 0.5, "ready": True, "pending": 10}
               for i in range(2)}
    control.finish(name, token, status, workers)
    client = redis.Redis.from_url(url)
    now = time.time()
    emitted = [0, 7_500_000, 7_500_000 + int(PEAK * 100), 20_000_000]
    client.delete(ctl_key(name, "history"))
    client.rpush(ctl_key(name, "history"), *(
        json.dumps({"t": now - 300 + 100 * i, "emitted": e, "acked": e // 2, "failed": i, "p50": 12.5, "p99": 880.0})
        for i, e in enumerate(emitted)))


def drop_run(client: redis.Redis, name: str) -> None:
    for k in client.keys(f"topology:{{{name}:*"):
        client.delete(k)
    client.zrem(REGISTRY, name)


@pytest.fixture(scope="module")
def data(redis_server):
    """A finished real run of NAME, a planted checkpoint and txid, and a record whose name and
    error carry HTML (escaping)."""
    if redis_server.proc is None:
        redis_server.start()
    url = redis_server.url
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushall()
    with LocalCluster(workers=2, redis_url=url) as cluster:
        result = cluster.run(NAME, topology(), {"test.redis.url": url, "test.key": "ui"}, timeout=120)
    assert result.state == "completed"
    # Where the runtime keeps them: the checkpoint record (state/layout.py) and the transactional
    # coordinator's next txid (state/transactional.py).
    save_checkpoint(client, NAME, CheckPointState(7, PREPARING))
    client.set(current_key(NAME), 12)
    control = ControlPlane(url)
    token = control.register(EVIL_RUN, "local", 1)
    status = RunStatus(EVIL_RUN, "failed", error="<b>boom</b>",
                       components={"<i>x</i>": ComponentStats(emitted=3), EVIL: ComponentStats(emitted=1)},
                       errors=[{"component": "<i>x</i>", "task": 1, "error": "<img src=x onerror=alert(1)>",
                                "traceback": "Traceback <script>alert(2)</script>"}])
    control.finish(EVIL_RUN, token, status, {"0": {"host": "<h>", "heartbeat_age_secs": 1.0}})
    client.zadd(REGISTRY, {EVIL: time.time()})  # written by something else: listed nowhere, never a key
    yield client
    client.flushall()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, redis_server, airflow_db):
    """The real Airflow API server app (with every plugin) on the session's migrated Airflow DB
    (token checks read its revoked-token table) and an admin's JWT from /auth/token."""
    mp = pytest.MonkeyPatch()
    pw = tmp_path_factory.mktemp("auth") / "passwords.json"
    pw.write_text(json.dumps({"admin": PASSWORD}))
    mp.setenv("AIRFLOW__CORE__AUTH_MANAGER",
              "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager")
    mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
    mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(pw))
    mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "ui-test-secret-" + "x" * 64)
    mp.setenv("TOPOLOGY_REDIS_URL", redis_server.url)
    from airflow.api_fastapi.app import create_app

    app = create_app()
    with TestClient(app, base_url="http://127.0.0.1") as tc:
        r = tc.post("/auth/token", json={"username": "admin", "password": PASSWORD})
        assert r.status_code == 201, r.text
        yield tc, app, r.json()["access_token"]
    mp.undo()


def _auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def _raw_status(client: redis.Redis, name: str) -> dict:
    return json.loads(client.get(ctl_key(name, "status")))


def test_every_route_requires_airflow_login(airflow, data):
    tc, _, token = airflow
    for path in ENDPOINTS:
        assert tc.get(path).status_code == 401, path
        assert tc.get(path, headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403, path
        assert tc.get(path, headers=_auth(token)).status_code == 200, path
    for path in PAGES:  # a browser without a session is sent to Airflow's login, then back
        r = tc.get(path, headers={"Accept": "text/html"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/auth/login?next="), path
    # The UI's session cookie is what a logged-in browser sends.
    tc.cookies.set("_token", token)
    try:
        assert tc.get(PAGES[1]).status_code == 200
        assert tc.get(API).status_code == 200
    finally:
        tc.cookies.clear()


def test_api_list_matches_redis(airflow, data):
    tc, _, token = airflow
    r = tc.get(API, headers=_auth(token))
    assert r.status_code == 200
    body = r.json()
    # Every valid id of the registry, newest first; the invalid one planted there is left out.
    assert [t["name"] for t in body["topologies"]] == [n for n in data.zrevrange(REGISTRY, 0, -1) if n != EVIL]
    assert body["total_entries"] == 2
    t = next(t for t in body["topologies"] if t["name"] == NAME)
    raw = _raw_status(data, NAME)
    assert t["state"] == raw["state"] == "completed" and t["live"] is False
    for k in ("emitted", "acked", "failed", "replayed"):
        assert t["totals"][k] == sum(c[k] for c in raw["components"].values()), k
    assert t["launcher"] == "local" and t["workers"] == 2


def test_api_topology_matches_redis(airflow, data):
    tc, _, token = airflow
    d = tc.get(f"{API}/{NAME}", headers=_auth(token)).json()
    raw = _raw_status(data, NAME)
    assert set(d["components"]) == {"numbers", "double", "sink"}
    for comp, stats in raw["components"].items():
        for k in ("emitted", "acked", "failed", "replayed", "executed", "tasks"):
            assert d["components"][comp][k] == stats[k], (comp, k)
    c = d["components"]
    # 400 numbers, each doubled; 8 planted failures replayed (0, 100, 200, 300 and their +1000s).
    assert c["numbers"]["acked"] == 400 and c["numbers"]["failed"] >= 1 and c["numbers"]["replayed"] >= 1
    assert c["numbers"]["complete_latency_p99_ms"] is not None
    assert d["checkpoint"] == {"txid": 7, "phase": "PREPARING", "last_committed": 6}
    assert d["transactional"] == {"current_txid": 12, "last_committed": 11}
    # errors: most recent first, with the traceback
    assert d["errors"] and d["errors"][0] == raw["errors"][-1]
    assert all(e["component"] == "sink" and "planted <bug>" in e["error"] and "Traceback" in e["traceback"]
               for e in d["errors"])
    # worker heartbeats: one per worker slot, last seen = publish time - heartbeat age
    assert [w["worker"] for w in d["worker_heartbeats"]] == sorted(raw["workers"], key=int)
    for w in d["worker_heartbeats"]:
        age = raw["workers"][w["worker"]]["heartbeat_age_secs"]
        assert w["last_seen"] == pytest.approx(raw["updated"] - age, abs=0.01)
        assert w["pid"] == raw["workers"][w["worker"]]["pid"]
    # the chart's history: what the supervisor pushed (bounded list), rates from it
    history = [json.loads(s) for s in data.lrange(ctl_key(NAME, "history"), 0, -1)]
    assert d["history"] == history and len(history) >= 2
    last = history[-1]
    # tuple trees: the spouts' acks (components that execute nothing), not every bolt's too
    assert last["acked"] == sum(s["acked"] for s in raw["components"].values() if s["executed"] == 0)
    assert last["p99"] == max(s["complete_latency_p99_ms"] for s in raw["components"].values()
                              if s["complete_latency_p99_ms"] is not None)
    assert d["series"] and all(s["emitted_per_sec"] >= 0 for s in d["series"])


def _cells(page: str, component: str) -> dict[str, str]:
    return dict(re.findall(rf'data-testid="(\w+)" data-component="user:{re.escape(component)}">([^<]*)<', page))


def test_pages_show_redis_counts_and_escape_everything(airflow, data):
    tc, _, token = airflow
    raw = _raw_status(data, NAME)
    page = tc.get(f"/topologies/topology/{NAME}", headers=_auth(token)).text
    for comp, stats in raw["components"].items():
        cells = _cells(page, comp)
        for k in ("tasks", "emitted", "acked", "failed", "replayed", "executed", "late", "dropped"):
            assert cells[k].replace(",", "") == str(stats[k]), (comp, k)
        assert cells["capacity"] == _num(stats["capacity"]), comp  # bolts measured, spouts "–"
    assert raw["components"]["sink"]["capacity"] is not None and raw["components"]["numbers"]["capacity"] is None
    assert page.count("<svg") == 3 and "<polyline" in page and "<circle" in page  # topology graph, throughput and latency charts
    assert 'data-testid="checkpoint-txid">7<' in page and 'data-testid="checkpoint-phase">PREPARING<' in page
    assert 'data-testid="tx-current">12<' in page
    assert page.count('data-testid="error"') == len(raw["errors"][-20:])
    assert "planted &lt;bug&gt;" in page and "Traceback" in page
    assert page.count("<tr data-worker=") == len(raw["workers"])
    for w, figures in raw["workers"].items():  # backpressure per worker: on or off, and the seconds
        row = re.search(rf'<tr data-worker="{w}">(.*?)</tr>', page).group(1)
        assert f'data-testid="backpressure">{"on" if figures["backpressure"] else "off"}<' in row
        assert f'data-testid="backpressure-secs">{_num(figures["backpressure_secs"])}<' in row

    listing = tc.get("/topologies/", headers=_auth(token)).text
    assert f'href="/topologies/topology/{NAME}"' in listing
    assert f'href="/topologies/topology/{EVIL_RUN}"' in listing
    assert "evil%3Cscript" not in listing and "evil&lt;script" not in listing  # the invalid id is not listed
    evil = tc.get(f"/topologies/topology/{EVIL_RUN}", headers=_auth(token))
    assert evil.status_code == 200
    invalid = tc.get("/topologies/topology/evil%3Cscript%3Ealert%281%29%3C%2Fscript%3E", headers=_auth(token))
    assert invalid.status_code == 404
    for text in (listing, evil.text, invalid.text):
        assert "<script>" not in text and "<img" not in text and "<b>boom" not in text and "<h>" not in text
    assert "evil&lt;script&gt;alert(1)&lt;/script&gt;" in evil.text  # a component name with markup, escaped
    assert "Traceback &lt;script&gt;alert(2)&lt;/script&gt;" in evil.text


def test_list_shows_spout_tuple_trees_not_every_components_sum(airflow, data):
    """Bolts ack (and emit) far more than the spout emitted: the list shows the spouts' tuples,
    i.e. tuple trees, under headers that say so; the JSON keeps the all-component totals too."""
    tc, _, token = airflow
    url = data.connection_pool.connection_kwargs
    plant_wide_run(f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}")
    try:
        t = next(t for t in tc.get(API, headers=_auth(token)).json()["topologies"] if t["name"] == WIDE)
        assert t["spouts"] == {"spouts": 1, **SPOUT, "replayed": 10_000}
        assert t["totals"]["acked"] == 6_990_000 > t["totals"]["emitted"] == 6_000_000  # every component
        page = tc.get("/topologies/", headers=_auth(token)).text
        wide = re.search(rf'<tr data-topology="{WIDE}">(.*?)</tr>', page).group(1)
        cells = dict(re.findall(r'data-testid="(emitted|acked|failed)">([^<]*)<', wide))
        assert cells == {"emitted": "1,000,000", "acked": "990,000", "failed": "10,000"}
        assert "spout tuples (tuple trees)" in page
        assert [h for h in re.findall(r'data-testid="head-(\w+)">([^<]*)<', page)] == [
            ("emitted", "emitted"), ("acked", "acked"), ("failed", "failed")]
        # the real run: its spout's own figures (400 numbers, each tree acked once)
        raw = _raw_status(data, NAME)["components"]["numbers"]
        row = re.search(rf'<tr data-topology="{NAME}">(.*?)</tr>', page).group(1)
        cells = dict(re.findall(r'data-testid="(emitted|acked|failed)">([^<]*)<', row))
        assert {k: int(v.replace(",", "")) for k, v in cells.items()} == {k: raw[k] for k in cells}
        assert raw["acked"] == 400
        # long cells are cut to their column (CSS) with the whole text in a tooltip
        assert f'<span class="t" title="{WIDE}">{WIDE}</span>' in wide
        for text in (f"nightly_wordcount_{'x' * 40}", "manual__2026-11-25T04:48:10.327669+00:00"):
            assert f'<span class="t" title="{text}">{text}</span>' in wide
    finally:
        drop_run(data, WIDE)


def test_chart_top_label_fits_a_112k_per_second_sample(airflow, data):
    """A 112,066.21 tuples/s interval: the y labels are compact round numbers and the chart's left
    margin is computed to fit the widest one (it was a fixed 56 px that cut "112,066.21")."""
    from topology_airflow.app import axis_label, label_width, nice_max

    tc, _, token = airflow
    url = data.connection_pool.connection_kwargs
    plant_wide_run(f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}")
    try:
        d = tc.get(f"{API}/{WIDE}", headers=_auth(token)).json()
        assert max(p["emitted_per_sec"] for p in d["series"]) == PEAK
        page = tc.get(f"/topologies/topology/{WIDE}", headers=_auth(token)).text
        svg = re.search(r'<svg[^>]*aria-label="Throughput[^"]*"[^>]*>.*?</svg>', page, re.S).group(0)
        left = int(re.search(r'data-left="(\d+)"', svg).group(1))
        labels = re.findall(r'<text class="y-label" x="([\d.]+)"[^>]*>([^<]*)</text>', svg)
        assert [t for _, t in labels] == ["0", "60k", "120k"]
        for x, text in labels:  # right-aligned at x: the text spans x - width .. x, inside the SVG
            assert float(x) == left - 4 and float(x) - label_width(text) >= 2, (x, text, left)
        assert "emitted/s 112,066.21</title>" in svg  # the exact value on hover
    finally:
        drop_run(data, WIDE)
    # the pure parts: compact labels, round axis tops, a width bound that covers real glyphs
    assert [axis_label(v) for v in (0, 0.25, 12.5, 950, 1200, 60_000, PEAK, 1.5e6, 999_500, 2e9)] == [
        "0", "0.25", "12.5", "950", "1.2k", "60k", "112k", "1.5M", "1M", "2G"]
    assert [nice_max(v) for v in (PEAK * 1.05, 0.9, 7, 0)] == [120_000, 1, 8, 1]
    # a digit is 5.5-5.6 px at 10 px in the usual UI fonts, 6.36 px in DejaVu Sans (the widest)
    assert label_width("120k") >= 3 * 6.36 + 5.8 and label_width("112,066.21") > 56  # the old margin cut it


def test_unknown_topology_is_a_clear_404(airflow, data):
    tc, _, token = airflow
    r = tc.get(f"{API}/no-such-topology", headers=_auth(token))
    assert r.status_code == 404
    assert "topology 'no-such-topology' not found" in r.json()["detail"]
    page = tc.get("/topologies/topology/no-such-topology", headers=_auth(token))
    assert page.status_code == 404 and "text/html" in page.headers["content-type"]
    assert "topology &#x27;no-such-topology&#x27; not found" in page.text


def test_read_only_no_mutating_routes_and_no_writes(airflow, data):
    tc, app, token = airflow
    from topology_airflow.app import app as status_app

    methods = {m for route in status_app.routes for m in (getattr(route, "methods", None) or ())}
    assert methods <= {"GET", "HEAD"}, methods
    before = {k: data.dump(k) for k in data.keys("*")}
    for path in ENDPOINTS:
        tc.get(path, headers=_auth(token))
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert tc.request(method, path, headers=_auth(token)).status_code == 405, (method, path)
    assert {k: data.dump(k) for k in data.keys("*")} == before  # reading changed nothing in Redis


def test_dag_run_view_filters_to_that_runs_topologies(airflow, data, monkeypatch):
    tc, _, token = airflow
    url = data.connection_pool.connection_kwargs
    control = ControlPlane(f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}")
    # What Airflow puts into a task's environment (inherited by spark-submit's driver).
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "wordcount_topology")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__1")
    monkeypatch.setenv("AIRFLOW_CTX_TASK_ID", "submit")
    token_ = control.register("ui-from-dag", "spark", 2)
    control.finish("ui-from-dag", token_, RunStatus("ui-from-dag", "completed"))
    try:
        r = tc.get(API, params={"dag_id": "wordcount_topology", "run_id": "manual__1"}, headers=_auth(token))
        assert [t["name"] for t in r.json()["topologies"]] == ["ui-from-dag"]
        assert r.json()["topologies"][0]["dag_run_id"] == "manual__1"
        page = tc.get("/topologies/", params={"dag_id": "wordcount_topology", "run_id": "manual__1"},
                      headers=_auth(token)).text
        assert "ui-from-dag" in page and NAME not in page
    finally:
        for k in data.keys("topology:{ui-from-dag:ctl}:*"):
            data.delete(k)
        data.zrem(REGISTRY, "ui-from-dag")


def test_history_is_bounded_and_rides_with_publish(data, monkeypatch):
    import topology_runtime.control.control_plane as cp

    url = data.connection_pool.connection_kwargs
    control = ControlPlane(f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}")
    monkeypatch.setattr(cp, "HISTORY_SAMPLES", 5)
    token = control.register("ui-bounded", "local", 1)
    try:
        for i in range(12):
            control.publish("ui-bounded", token, RunStatus("ui-bounded", "running",
                                                    components={"s": ComponentStats(emitted=i, acked=i)}))
        samples = [json.loads(s) for s in data.lrange(ctl_key("ui-bounded", "history"), 0, -1)]
        assert [s["emitted"] for s in samples] == [7, 8, 9, 10, 11]
        assert samples[-1]["t"] == pytest.approx(time.time(), abs=5)
        # a new run of the same id starts a fresh chart
        control.finish("ui-bounded", token, RunStatus("ui-bounded", "completed"))
        control.register("ui-bounded", "local", 1)
        assert data.llen(ctl_key("ui-bounded", "history")) == 0
    finally:
        for k in data.keys("topology:{ui-bounded:ctl}:*"):
            data.delete(k)
        data.zrem(REGISTRY, "ui-bounded")


def test_plugin_registered_once_with_views_app_and_link(airflow, data):
    tc, app, token = airflow
    from importlib.metadata import distributions

    from airflow import plugins_manager
    from starlette.routing import Mount
    from topology_airflow import SubmitTopologyOperator
    from topology_airflow.links import TopologyLink

    plugins, errors = plugins_manager._get_plugins()
    ours = [p for p in plugins if p.name == "topology_runtime"]
    assert len(ours) == 1
    # Loaded from the entry point when installed; plugins/topology_plugin.py then defines nothing,
    # and .airflowignore keeps the package's modules from being imported as loose plugin files.
    copies = [d for d in distributions() if any(e.group == "airflow.plugins" and e.name == "topology_runtime"
                                                for e in d.entry_points)]
    for where, message in errors.items():
        # Only Airflow's own dedup of one distribution seen twice on sys.path (a build's stray
        # topology_runtime.egg-info in the repo root) may show up, never our files.
        assert "topology-runtime" in where and "already registered" in message and len(copies) > 1, (where, message)
    assert "plugins/" not in " ".join(errors)
    views = {v["destination"]: v for v in ours[0].external_views}
    assert views["nav"]["href"] == "topologies/"
    assert "{DAG_ID}" in views["dag_run"]["href"] and "{RUN_ID}" in views["dag_run"]["href"]
    assert [m.path for m in app.routes if isinstance(m, Mount) and m.path == "/topologies"] == ["/topologies"]
    assert any(isinstance(link, TopologyLink) for link in ours[0].operator_extra_links)

    op = SubmitTopologyOperator(task_id="submit", topology="examples.wordcount:topology", name=NAME)
    links = [link for link in op.operator_extra_links if isinstance(link, TopologyLink)]
    assert links and links[0].name == "Topology"
    href = links[0].get_link(op, ti_key=None)
    assert href == f"/topologies/topology/{NAME}"
    # What the DAG processor stores: the UI resolves the button from the XCom the task runner
    # pushes with get_link's URL when the task ends.
    from airflow.serialization.serialized_objects import OperatorSerialization

    assert OperatorSerialization.serialize_operator(op)["_operator_extra_links"] == {"Topology": "_link_TopologyLink"}
    assert tc.get(href, headers=_auth(token)).status_code == 200
    # the UI lists the views for a logged-in user
    ui = tc.get("/api/v2/plugins", headers=_auth(token)).json()
    names = [v["url_route"] for p in ui["plugins"] if p["name"] == "topology_runtime" for v in p["external_views"]]
    assert sorted(names) == ["topologies", "topologies-of-run"]


def test_plugins_folder_defines_the_plugin_only_without_the_entry_point(monkeypatch):
    """Airflow's own plugins-folder loader on plugins/: with the project installed (entry point
    present) it finds nothing there and imports no module of the package; without the entry
    point (simulated: the one patch in this file, of importlib.metadata's lookup) it finds the
    plugin exactly once."""
    import importlib.metadata
    from pathlib import Path

    from airflow._shared.plugins_manager import _load_plugins_from_plugin_directory

    folder = str(Path(__file__).resolve().parent.parent / "plugins")
    plugins, errors = _load_plugins_from_plugin_directory(folder, ignore_file_syntax="glob")
    assert plugins == [] and errors == {}
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    plugins, errors = _load_plugins_from_plugin_directory(folder, ignore_file_syntax="glob")
    assert [p.name for p in plugins] == ["topology_runtime"] and errors == {}
    assert str(plugins[0].source).endswith("topology_plugin.py")


def test_a_paused_run_shows_paused_with_its_shape(airflow, data, redis_server):
    tc, _, token = airflow
    control = ControlPlane(redis_server.url)
    token_ = control.register("paused-run", "local", 3)  # live (its lease held), spouts paused
    workers = {str(i): {"pid": 10 + i, "incarnation": 1, "heartbeat_age_secs": 0.3, "ready": True,
                        "backpressure": on, "backpressure_secs": secs}
               for i, (on, secs) in enumerate([(True, 12.5), (False, 3.25), (False, 0.0)])}
    control.publish("paused-run", token_, RunStatus(
        "paused-run", "running", paused=True, workers=3, parallelism={"ticks": 2, "count": 4},
        components={"ticks": ComponentStats(emitted=9, tasks=2), "count": ComponentStats(executed=9, tasks=4,
                                                                                         capacity=0.874)}), workers)
    listing = tc.get("/topologies/", headers=_auth(token)).text
    row = listing[listing.index('<tr data-topology="paused-run">'):]
    row = row[:row.index("</tr>")]
    assert 'class="state state-paused"' in row and ">3<" in row
    page = tc.get("/topologies/topology/paused-run", headers=_auth(token)).text
    assert '<span class="state state-paused" data-testid="state">paused</span>' in page
    assert "<dt>parallelism</dt><dd>ticks=2, count=4</dd>" in page and "<dt>workers</dt><dd>3</dd>" in page
    # Links to the DAGs that operate it; the page itself changes nothing.
    assert 'href="/dags/topology_rebalance"' in page and 'href="/dags/topology_recovery"' in page
    assert 'href="/dags/topology_upgrade"' in page
    assert re.findall(r'data-testid="capacity" data-component="user:(\w+)">([^<]*)<', page) == [
        ("ticks", "–"), ("count", "0.87")]
    held = re.findall(r'<tr data-worker="(\d)">.*?data-testid="backpressure">(\w+)<.*?'
                      r'data-testid="backpressure-secs">([^<]*)<', page)
    assert held == [("0", "on", "12.5"), ("1", "off", "3.25"), ("2", "off", "0")]
    control.release("paused-run", token_)
    drop_run(data, "paused-run")


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(family sample name, labels) -> value, parsed with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_are_prometheus_text_equal_to_the_run_status(airflow, data):
    """/metrics under Airflow's API server: every topology of the Redis (finished ones too, their
    state label saying so), counters equal to RunStatus, with the checkpoint's committed txid."""
    tc, _, token = airflow
    r = tc.get(METRICS, headers=_auth(token))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    got = _samples(r.text)
    status = _raw_status(data, NAME)
    assert got[("topology_run_info", frozenset({("topology", NAME), ("state", "completed"),
                                                 ("launcher", "local")}))] == 1
    assert got[("topology_workers", frozenset({("topology", NAME)}))] == 0  # it ended
    for component, c in status["components"].items():
        labels = frozenset({("topology", NAME), ("component", component)})
        for k in ("emitted", "acked", "failed", "executed", "replayed"):
            assert got[(f"topology_component_{k}_total", labels)] == c[k], (component, k)
    spout = frozenset({("topology", NAME), ("component", "numbers"), ("quantile", "0.99")})
    assert got[("topology_complete_latency_ms", spout)] == status["components"]["numbers"]["complete_latency_p99_ms"]
    # the planted checkpoint record: txid 7 preparing, so 6 is the last committed
    assert got[("topology_checkpoint_committed_txid", frozenset({("topology", NAME)}))] == 6
    # a record whose names carry HTML is exported as plain label text, escaped by the format
    assert any(dict(labels).get("component") == "<i>x</i>" for _, labels in got)


def test_topology_status_shows_the_checkpoint_takes_json_and_no_heartbeats_once_ended(data, redis_server):
    import subprocess
    import sys

    def status(*extra: str) -> str:
        out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "status", NAME, "--redis",
                              redis_server.url, *extra], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout
    text = status()
    assert "checkpoint: txid 7, preparing" in text
    assert "heartbeat" not in text  # the run ended: no worker is beating
    assert "capacity" in text.splitlines()[2]  # the table's header has the column
    rec = json.loads(status("--json"))
    assert rec["state"] == "completed" and rec["live"] is False
    assert rec["checkpoint"] == {"txid": 7, "phase": "PREPARING"}
    assert rec["status"]["components"] == _raw_status(data, NAME)["components"]


def test_the_topology_page_shows_the_last_sampled_tuples(airflow, data, redis_server):
    from topology_runtime.control.inspection import record_samples

    tc, _, token = airflow
    record_samples(ControlPlane(redis_server.url), NAME, [
        {"time": time.time(), "component": "double", "task": 3, "stream": "default", "values": f"[{i}, '<b>']"}
        for i in range(12)])
    page = tc.get(f"/topologies/topology/{NAME}", headers=_auth(token)).text
    assert page.count('data-testid="sample"') == 10  # the newest ten
    assert "[11, &#x27;&lt;b&gt;&#x27;]" in page and "[1, " not in page  # escaped; the oldest two left out
