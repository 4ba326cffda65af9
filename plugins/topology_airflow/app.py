"""The topology status app mounted in Airflow's API server (``/topologies``): read-only pages and
JSON over the control plane in Redis.

Every route requires an Airflow login (the UI's ``_token`` cookie or a ``Bearer`` token from
``POST /auth/token``), checked by Airflow's own ``requires_access_view`` dependency; a browser
without a session is sent to the login page, any other client gets 401/403. Nothing here writes
to Redis or starts a server: the app only reads what runs published.

    GET /topologies/                        list page (``?dag_id=&run_id=`` filters to one DAG run)
    GET /topologies/topology/{name}         one topology: components, chart, checkpoints, workers, errors
    GET /topologies/api/topologies          the list as JSON (same filters)
    GET /topologies/api/topologies/{name}   one topology as JSON
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, cast
from urllib.parse import quote

import redis
from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from state.connection import redacted
from state.layout import REGISTRY, TOPOLOGY_ID, ctl_key
from state.transactional import current_key, parse_txid
from topology_runtime.control.control_plane import ControlPlane, RunRecord
from topology_runtime.control.inspection import read_samples

from .graph import svg_graph
from .pages import (  # noqa: F401 - re-exported: tests and other modules import them from here
    REFRESH_SECS,
    _ago,
    _cut,
    _num,
    _page,
    _span,
    _state,
    _when,
    axis_label,
    esc,
    label_width,
    nice_max,
    svg_chart,
)

URL_PREFIX = "/topologies"
MAX_ERRORS = 20  # the page shows the most recent errors; the run keeps its own bounded list
SAMPLES_SHOWN = 10  # the newest sampled tuples on the topology page


# --- reading Redis ------------------------------------------------------------------------------
def redis_url() -> str:
    """Where the runs publish: ``TOPOLOGY_REDIS_URL``, else the project-local Redis. Looked up
    per request (cheap) and never started from here: the status app must not change anything."""
    env = os.environ.get("TOPOLOGY_REDIS_URL")
    if env:
        return env
    from topology_runtime.control.redis_server import project_redis_url

    return project_redis_url(start=False)


_planes: dict[str, ControlPlane] = {}


def _control() -> ControlPlane:
    url = redis_url()
    if url not in _planes:  # one connection pool per Redis, shared by the request threads
        _planes[url] = ControlPlane(url)
    return _planes[url]


def _where(url: str) -> str:
    """The Redis address for messages, without its password (any URL form, several hosts)."""
    return redacted(url)


def _totals(components: dict[str, dict]) -> dict[str, int]:
    """Every user component's counters summed (bolts' acks included: not a count of trees)."""
    return {k: sum(int(c.get(k) or 0) for c in components.values())
            for k in ("emitted", "acked", "failed", "replayed", "executed")}


def is_spout(name: str, c: dict[str, Any]) -> bool:
    """A user spout's figures: spouts never execute a tuple (``executed`` counts a bolt's input
    tuples; a bolt that executed nothing has emitted, acked and failed nothing either). The
    runtime's own components (``$checkpointspout``, ``__acker``) are not the user's trees."""
    return not name.startswith(("$", "__")) and not int(c.get("executed") or 0)


def spout_totals(components: dict[str, dict]) -> dict[str, int]:
    """The tuple trees: what the spouts emitted, and how many of those trees were acked (fully
    processed) or failed (replayed counts the re-emits of failed ones)."""
    spouts = [c for name, c in components.items() if is_spout(name, c)]
    return {"spouts": len(spouts),
            **{k: sum(int(c.get(k) or 0) for c in spouts) for k in ("emitted", "acked", "failed", "replayed")}}


def _workers(status: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """Last heartbeat per worker slot as wall-clock time: the supervisor publishes each slot's
    heartbeat age together with the publish time (``updated``)."""
    updated = status.get("updated")
    out = []
    workers = status.get("workers") or {}
    for wid in sorted(workers, key=lambda w: (not str(w).isdigit(), int(w) if str(w).isdigit() else 0, str(w))):
        w = workers[wid] or {}
        age = w.get("heartbeat_age_secs")
        last_seen = round(float(updated) - float(age), 3) if updated is not None and age is not None else None
        out.append({
            "worker": str(wid), "host": w.get("host"), "pid": w.get("pid"), "incarnation": w.get("incarnation"),
            "address": w.get("address"), "ready": w.get("ready"), "pending": w.get("pending"),
            "queue": w.get("queue"), "backlog": w.get("backlog"),
            "backpressure": bool(w.get("backpressure")), "backpressure_secs": w.get("backpressure_secs"),
            "last_seen": last_seen,
            "seconds_since_seen": round(now - last_seen, 1) if last_seen is not None else None,
        })
    return out


def throughput_series(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rates between consecutive samples (tuples/s) with the latency percentiles of each sample."""
    out = []
    for prev, cur in zip(history, history[1:]):
        dt = float(cur.get("t", 0)) - float(prev.get("t", 0))
        if dt <= 0:
            continue
        rates = {k: (int(cur.get(k) or 0) - int(prev.get(k) or 0)) / dt for k in ("emitted", "acked", "failed")}
        if any(v < 0 for v in rates.values()):
            continue  # counters started over (a new run of the same id)
        out.append({"t": cur["t"], **{f"{k}_per_sec": round(v, 2) for k, v in rates.items()},
                    "complete_latency_p50_ms": cur.get("p50"), "complete_latency_p99_ms": cur.get("p99")})
    return out


def _summary(rec: RunRecord, now: float) -> dict[str, Any]:
    status = rec.status or {}
    comps = status.get("components") or {}
    return {
        "name": rec.name, "state": rec.state, "paused": rec.paused, "live": rec.live,
        "launcher": rec.info.get("launcher"), "workers": status.get("worker_count") or rec.info.get("workers"),
        "parallelism": status.get("parallelism") or {},
        "started": rec.info.get("started"), "ended": rec.info.get("ended"),
        "dag_id": rec.info.get("dag_id"), "dag_run_id": rec.info.get("dag_run_id"),
        "uptime_secs": status.get("uptime_secs"), "restarts": status.get("restarts"),
        "error": status.get("error"), "updated": status.get("updated"),
        "components": len(comps), "totals": _totals(comps), "spouts": spout_totals(comps),
    }


def list_topologies(control: ControlPlane, dag_id: str | None = None,
                    run_id: str | None = None) -> list[dict[str, Any]]:
    now = time.time()
    out = []
    for name in cast("list[str]", control.redis.zrevrange(REGISTRY, 0, -1)):  # members, decoded
        if not TOPOLOGY_ID.fullmatch(name):
            continue  # not an id this runtime writes (nor one its keys could hold)
        rec = control.get(name)  # read only: unlike ControlPlane.list, never prunes the registry
        if rec is None:
            continue
        if dag_id and rec.info.get("dag_id") != dag_id:
            continue
        if run_id and rec.info.get("dag_run_id") != run_id:
            continue
        out.append(_summary(rec, now))
    return out


def topology_detail(control: ControlPlane, name: str) -> dict[str, Any] | None:
    if not TOPOLOGY_ID.fullmatch(name):
        return None
    rec = control.get(name)
    if rec is None:
        return None
    now = time.time()
    pipe = control.redis.pipeline(transaction=False)
    pipe.lrange(ctl_key(name, "history"), 0, -1)
    pipe.hgetall(ctl_key(name, "checkpoint"))
    pipe.get(current_key(name))  # the transactional coordinator's next txid (state/transactional.py)
    raw_history, checkpoint, tx_current = pipe.execute()
    history = [json.loads(s) for s in raw_history]
    status = rec.status or {}
    cp = None
    if checkpoint:
        txid, phase = int(checkpoint.get("txid", -1)), checkpoint.get("state", "?")
        # PREPARING(t) / COMMITTING(t): t-1 is the last txid committed by every task.
        cp = {"txid": txid, "phase": phase, "last_committed": txid if phase == "COMMITTED" else txid - 1}
    tx = None
    current = parse_txid(tx_current)
    if current is not None:
        tx = {"current_txid": current, "last_committed": current - 1}
    errors = list(status.get("errors") or [])[-MAX_ERRORS:]
    errors.reverse()  # most recent first
    return {
        **_summary(rec, now),
        "info": rec.info,
        "components": status.get("components") or {},
        "system_components": status.get("system_components") or {},
        "checkpoint": cp, "transactional": tx,
        "errors": errors,
        "worker_heartbeats": _workers(status, now),
        "history": history,
        "series": throughput_series(history),
        "graph": _graph(rec),
        "samples": read_samples(control, name, SAMPLES_SHOWN),
    }


def _graph(rec: RunRecord) -> list[dict[str, Any]]:
    try:
        graph = json.loads(rec.info.get("graph") or "[]")
    except ValueError:
        return []
    return graph if isinstance(graph, list) else []


# --- HTML ---------------------------------------------------------------------------------------
def _component_rows(comps: dict[str, dict], kind: str) -> str:
    rows = []
    for name, c in comps.items():
        cid = esc(f"{kind}:{name}")
        cells = "".join(
            f'<td class="n" data-testid="{esc(k)}" data-component="{cid}">{_num(c.get(k))}</td>'
            for k in ("tasks", "emitted", "acked", "failed", "replayed", "executed", "late", "dropped", "capacity"))
        lat = (f"{_num(c.get('complete_latency_p50_ms'))} / {_num(c.get('complete_latency_p99_ms'))}"
               if c.get("complete_latency_p50_ms") is not None else "–")
        rows.append(f'<tr data-component="{cid}"><td>{_cut(name)}</td>{cells}<td class="n">{lat}</td>'
                    f'<td class="n">{_num(c.get("execute_latency_ms"))}</td></tr>')
    head = ('<tr><th>component</th><th class="n">tasks</th><th class="n">emitted</th><th class="n">acked</th>'
            '<th class="n">failed</th><th class="n">replayed</th><th class="n">executed</th>'
            '<th class="n" title="windowed bolts: tuples at or behind the watermark">late</th>'
            '<th class="n" title="windowed bolts: tuples acked without being evaluated in a window">dropped</th>'
            '<th class="n" title="share of the last stats interval the busiest task spent executing (near 1: the '
            'bottleneck)">capacity</th>'
            '<th class="n">complete latency p50 / p99 ms</th><th class="n">execute latency ms</th></tr>')
    return f'<div class="wide"><table data-testid="{esc(kind)}-components">{head}{"".join(rows)}</table></div>'


def render_list(base: str, items: list[dict[str, Any]], dag_id: str | None, run_id: str | None,
                refresh: bool) -> str:
    now = time.time()
    rows = []
    for t in items:
        href = f"{base}/topology/{quote(t['name'], safe='')}"
        trees = t["spouts"]
        # DAG above run (two short lines rather than one wide one)
        dag = "<br>".join(_cut(v) for v in (t["dag_id"], t["dag_run_id"]) if v)
        rows.append(
            f'<tr data-topology="{esc(t["name"])}"><td><a href="{esc(href)}">{_cut(t["name"])}</a></td>'
            f'<td>{_state("paused" if t["paused"] else t["state"])}</td><td>{"yes" if t["live"] else "no"}</td>'
            f'<td class="opt">{_cut(t["launcher"], "t s")}</td>'
            f'<td class="n">{esc(t["workers"])}</td><td class="n opt">{_num(t["components"])}</td>'
            f'<td class="n" data-testid="emitted">{_num(trees["emitted"])}</td>'
            f'<td class="n" data-testid="acked">{_num(trees["acked"])}</td>'
            f'<td class="n" data-testid="failed">{_num(trees["failed"])}</td>'
            f'<td class="w">{esc(_when(t["started"]))}</td><td class="n opt">{_num(t["uptime_secs"])}</td>'
            f'<td>{dag}</td>'
            f'<td>{_ago(t["updated"], now, short=True)}</td></tr>')
    trees_title = ("tuples the spouts emitted (each one with a message id roots a tuple tree); acked: trees "
                   "processed in full; failed: trees that failed or timed out. Bolts' own acks are not counted")
    head = ('<tr><th rowspan="2">topology</th><th rowspan="2">state</th><th rowspan="2">live</th>'
            '<th class="opt" rowspan="2">launcher</th><th class="n" rowspan="2">workers</th>'
            '<th class="n opt" rowspan="2">components</th>'
            f'<th class="group" colspan="3" title="{esc(trees_title)}">spout tuples (tuple trees)</th>'
            '<th rowspan="2">started</th><th class="n opt" rowspan="2">uptime s</th><th rowspan="2">DAG / run</th>'
            '<th rowspan="2">updated</th></tr>'
            '<tr><th class="n" data-testid="head-emitted">emitted</th><th class="n" data-testid="head-acked">acked</th>'
            '<th class="n" data-testid="head-failed">failed</th></tr>')
    scope = ""
    if dag_id or run_id:
        scope = (f'<p>Started by DAG <b>{esc(dag_id or "any")}</b>, run <b>{esc(run_id or "any")}</b> '
                 f'(<a href="{esc(base)}/">all topologies</a>)</p>')
    none = "That DAG run started no topology." if dag_id or run_id else "No topology runs recorded in Redis."
    table = (f'<div class="wide"><table data-testid="topologies">{head}{"".join(rows)}</table></div>' if rows
             else f'<p class="muted" data-testid="empty">{none}</p>')
    return _page("Topologies", f"<h1>Topologies</h1>{scope}{table}"
                 '<p class="muted">Emitted, acked and failed count the spouts\' tuples: each emitted tuple is a '
                 "tuple tree, acked once every bolt processed it. Each topology's page has every component's "
                 f'figures. Read-only view of the control plane in Redis ({esc(_where(redis_url()))}).</p>',
                 refresh)


def render_topology(base: str, d: dict[str, Any], refresh: bool) -> str:
    now = time.time()
    info = d["info"]
    facts = [("launcher", info.get("launcher")), ("workers", d["workers"]),
             ("parallelism", ", ".join(f"{c}={n}" for c, n in d["parallelism"].items()) or "–"),
             ("driver", f"{info.get('host', '?')} pid {info.get('pid', '?')}"), ("started", _when(info.get("started"))),
             ("ended", _when(info.get("ended")) or "–"), ("uptime", f"{_num(d['uptime_secs'])} s"),
             ("restarts", d["restarts"]), ("status updated", _ago(d["updated"], now))]
    if info.get("dag_id"):
        facts.append(("started by", f"DAG {info['dag_id']} run {info.get('dag_run_id', '?')} "
                                    f"task {info.get('task_id', '?')}"))
    if info.get("master"):
        facts.append(("Spark master", info["master"]))
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v) if k != 'status updated' else v}</dd>" for k, v in facts)
    error = f'<p class="err" data-testid="run-error">Error: {esc(d["error"])}</p>' if d.get("error") else ""

    series = d["series"]
    charts = ('<div class="charts">'
              # the run's history samples sum every user component (bolts' emits and acks too)
              + svg_chart("Throughput, spout tuple trees", series, [("emitted_per_sec", "emitted/s", "#2b6cb0"),
                                                                 ("acked_per_sec", "acked/s", "#38a169"),
                                                                 ("failed_per_sec", "failed/s", "#e53e3e")],
                          "tuples/s")
              # the run's latency histograms are cumulative: each point is "since the run started"
              + svg_chart("Complete latency since start", series, [("complete_latency_p50_ms", "p50", "#805ad5"),
                                                       ("complete_latency_p99_ms", "p99", "#d69e2e")], "ms")
              + "</div>")
    window = (f'<p class="muted">{len(d["history"])} samples over the last '
              f'{esc(_span(d["history"][-1]["t"] - d["history"][0]["t"]))}</p>' if len(d["history"]) > 1 else "")

    cp = d["checkpoint"]
    cp_html = (f'<dl><dt>txid</dt><dd data-testid="checkpoint-txid">{cp["txid"]}</dd>'
               f'<dt>phase</dt><dd data-testid="checkpoint-phase">{esc(cp["phase"])}</dd>'
               f'<dt>last committed</dt><dd>{cp["last_committed"]}</dd></dl>' if cp
               else '<p class="muted" data-testid="checkpoint-none">No checkpoint record (no stateful bolts).</p>')
    tx = d["transactional"]
    tx_html = (f'<dl><dt>current txid</dt><dd data-testid="tx-current">{tx["current_txid"]}</dd>'
               f'<dt>last committed</dt><dd>{tx["last_committed"]}</dd></dl>' if tx
               else '<p class="muted" data-testid="tx-none">Not a transactional topology.</p>')

    wrows = "".join(
        f'<tr data-worker="{esc(w["worker"])}"><td>{esc(w["worker"])}</td><td>{_cut(w["host"])}</td>'
        f'<td class="n">{esc(w["pid"])}</td><td class="n">{esc(w["incarnation"])}</td>'
        f'<td>{esc(w["ready"])}</td><td class="n">{_num(w["pending"])}</td>'
        f'<td data-testid="backpressure">{"on" if w["backpressure"] else "off"}</td>'
        f'<td class="n" data-testid="backpressure-secs">{_num(w["backpressure_secs"])}</td>'
        f'<td data-testid="last-seen">{_ago(w["last_seen"], now)}</td></tr>'
        for w in d["worker_heartbeats"])
    held = ("the worker's spouts held back: its outbound batches wait for a slower consumer downstream "
            "(now, and seconds over the run)")
    workers = (f'<div class="wide"><table data-testid="workers"><tr><th>worker</th><th>host</th>'
               f'<th class="n">pid</th><th class="n">incarnation</th><th>ready</th><th class="n">pending</th>'
               f'<th title="{esc(held)}">backpressure</th><th class="n" title="{esc(held)}">backpressure s</th>'
               f"<th>last heartbeat</th></tr>{wrows}</table></div>" if wrows
               else '<p class="muted">No worker heartbeats published.</p>')

    errs = "".join(
        f'<li data-testid="error"><b>{esc(e.get("component"))}</b> task {esc(e.get("task"))}: '
        f'{esc(e.get("error"))}<details><summary>traceback</summary><pre>{esc(e.get("traceback"))}</pre>'
        f"</details></li>" for e in d["errors"])
    errors = f"<ol>{errs}</ol>" if errs else '<p class="muted" data-testid="no-errors">No errors.</p>'

    samples = "".join(
        f'<tr data-testid="sample"><td>{esc(_when(time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(x["time"]))))}</td>'
        f'<td>{esc(x["component"])}[{esc(x["task"])}]</td><td>{esc(x["stream"])}</td><td><code>{esc(x["values"])}</code>'
        f"</td></tr>" for x in reversed(d["samples"]))
    sampled = (f'<div class="wide"><table data-testid="samples"><tr><th>time</th><th>task</th><th>stream</th>'
               f"<th>values</th></tr>{samples}</table></div>" if samples
               else '<p class="muted" data-testid="samples-none">No sampled tuples (<code>topology sample ID '
                    "COMPONENT</code> records some for a while).</p>")
    graph = svg_graph(d["graph"], d["components"], d["parallelism"])
    system = (f'<h2>System components</h2>{_component_rows(d["system_components"], "system")}'
              if d["system_components"] else "")
    root = base[: -len(URL_PREFIX)] if base.endswith(URL_PREFIX) else ""  # Airflow's own pages
    operate = (f'<p class="muted" data-testid="operate">This page changes nothing. From Airflow: '
               f'<a href="{esc(root)}/dags/topology_rebalance">topology_rebalance</a> (rebalance, pause, resume) '
               f'&middot; <a href="{esc(root)}/dags/topology_recovery">topology_recovery</a> (after a crash) '
               f'&middot; <a href="{esc(root)}/dags/topology_upgrade">topology_upgrade</a> (new code, from a '
               f"savepoint)</p>")
    body = (f'<p><a href="{esc(base)}/">&larr; all topologies</a></p>'
            f'<h1><span data-testid="topology-name">{esc(d["name"])}</span> {_state("paused" if d["paused"] else d["state"])} '
            f'<span class="muted">{"live" if d["live"] else "not live"}</span></h1>{error}<dl>{dl}</dl>{operate}'
            f'<h2>Topology</h2><div class="wide">{graph}</div>'
            f'<h2>Components</h2>{_component_rows(d["components"], "user")}{system}'
            f"<h2>Throughput and complete latency</h2>{charts}{window}"
            f"<h2>Checkpoint</h2>{cp_html}<h2>Transactional</h2>{tx_html}"
            f"<h2>Worker heartbeats</h2>{workers}<h2>Sampled tuples</h2>{sampled}<h2>Last errors</h2>{errors}")
    return _page(f"Topology {d['name']}", body, refresh)


def _not_found(name: str) -> str:
    return (f"topology {name!r} not found: no run record in the control plane at {_where(redis_url())} "
            "(it never ran there, or its records expired)")


# --- the app ------------------------------------------------------------------------------------
def create_app() -> FastAPI:
    # WEBSITE is the permission every user of the Airflow UI has: whoever may open the UI may read
    # the topology status (it is read-only). The dependency applies to every route of this app.
    app = FastAPI(title="Topology status", dependencies=[Depends(requires_access_view(AccessView.WEBSITE))],
                  docs_url=None, redoc_url=None, openapi_url=None)  # no unauthenticated schema pages

    @app.exception_handler(StarletteHTTPException)
    async def _login_or_error(request: Request, exc: StarletteHTTPException) -> Response:
        # A browser without a session goes to Airflow's login and comes back; API clients get 401.
        if exc.status_code == 401 and not _is_api(request) and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        if exc.status_code == 404 and not _is_api(request):
            return HTMLResponse(_page("Not found", f'<h1>Not found</h1><p class="err">{esc(exc.detail)}</p>'
                                      f'<p><a href="{esc(_base(request))}/">all topologies</a></p>', False),
                                status_code=404)
        return await http_exception_handler(request, exc)

    @app.get("/", response_class=HTMLResponse)
    def list_page(request: Request, dag_id: str | None = None, run_id: str | None = None,
                  refresh: int = 1) -> HTMLResponse:
        items = _read(lambda c: list_topologies(c, dag_id, run_id))
        return HTMLResponse(render_list(_base(request), items, dag_id, run_id, bool(refresh)))

    @app.get("/topology/{name:path}", response_class=HTMLResponse)
    def topology_page(request: Request, name: str, refresh: int = 1) -> HTMLResponse:
        d = _read(lambda c: topology_detail(c, name))
        if d is None:
            raise HTTPException(404, _not_found(name))
        return HTMLResponse(render_topology(_base(request), d, bool(refresh)))

    @app.get("/metrics")
    def metrics() -> Response:
        """Prometheus text exposition of every topology (the same as ``topology metrics-server``),
        authenticated like the rest of the app: scrape it with an Airflow API token."""
        from topology_runtime.control.metrics import CONTENT_TYPE, exposition

        return Response(_read(exposition), media_type=CONTENT_TYPE)

    @app.get("/api/topologies")
    def api_list(dag_id: str | None = None, run_id: str | None = None) -> dict[str, Any]:
        items = _read(lambda c: list_topologies(c, dag_id, run_id))
        return {"topologies": items, "total_entries": len(items)}

    @app.get("/api/topologies/{name:path}")
    def api_topology(name: str) -> dict[str, Any]:
        d = _read(lambda c: topology_detail(c, name))
        if d is None:
            raise HTTPException(404, _not_found(name))
        return d

    return app


def _is_api(request: Request) -> bool:
    return request.url.path.startswith(f"{_base(request)}/api/")


def _base(request: Request) -> str:
    """The app's own prefix as the browser sees it (mount point plus Airflow's base path)."""
    return request.scope.get("root_path", "").rstrip("/")


def _read(fn: Any) -> Any:
    try:
        return fn(_control())
    except redis.RedisError as e:
        raise HTTPException(503, f"the topology control plane in Redis ({_where(redis_url())}) "
                                 f"is unreachable: {e}") from e


app = create_app()
