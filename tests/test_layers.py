"""The architecture holds on import: layers import only downwards, and the API and the protocol
state machines load no I/O library."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "topology_runtime"

# Rank of each package of topology_runtime: a module imports only from packages of a lower rank
# (or its own). ``state`` is a separate top-level package below everything but the API.
RANK = {
    "api": 0, "testing": 1, "transport": 2, "reliability": 3, "windowing": 3, "plan": 4, "coordination": 4,
    "worker": 5, "transactional": 5, "supervisor": 6, "connectors": 6, "control": 7, "drpc": 7, "launchers": 8,
    "trident": 8, "cli": 9,
}


def _imports(path: Path) -> list[str]:
    """Absolute names of the topology_runtime modules ``path`` imports (relative ones resolved)."""
    rel = path.relative_to(ROOT).with_suffix("")
    pkg = list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append(name)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return [n for n in out if n.startswith("topology_runtime.")]


def test_every_module_is_in_a_ranked_package():
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).parts
        assert len(parts) == 1 or parts[0] in RANK, f"{path}: package {parts[0]!r} has no layer in RANK"


def test_imports_point_down_the_layers():
    wrong = []
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).parts
        if len(parts) == 1:
            continue  # topology_runtime/__init__.py: the public face, lazy
        here = parts[0]
        for name in _imports(path):
            there = name.split(".")[1]
            if there != here and there in RANK and RANK[there] >= RANK[here]:
                wrong.append(f"{path.relative_to(ROOT)} ({here}) imports {name} ({there})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_state_never_imports_the_runtime():
    for path in (ROOT / "state").rglob("*.py"):
        assert not _imports(path) and "topology_runtime" not in path.read_text().split('"""')[-1], path


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", [
    "topology_runtime", "topology_runtime.reliability.acker", "topology_runtime.reliability.checkpointing",
    "topology_runtime.coordination", "topology_runtime.coordination.tracker", "topology_runtime.reliability.transactional",
    "topology_runtime.reliability.checkpoint_coordinator",
    "topology_runtime.windowing", "topology_runtime.windowing.manager",
])
def test_api_and_reliability_load_no_io(module):
    loaded = _loaded_after(f"import {module}")
    heavy = {"zmq", "redis", "pyspark", "msgpack", "socket", "topology_runtime.launchers",
             "topology_runtime.launchers.local", "topology_runtime.worker", "topology_runtime.transport.sockets"}
    assert not loaded & heavy, f"importing {module} loads {sorted(loaded & heavy)}"


def test_a_local_run_without_redis_never_loads_redis():
    # redis-py with OpenTelemetry takes 0.15-0.25 s to import: a LocalCluster run that uses no
    # Redis (acking, no state) must not pay it in its start-up.
    code = textwrap.dedent("""
        from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder

        class Once(Spout):
            outputs = ["n"]

            def open(self, conf, context):
                self.todo = list(range(20))

            def next_tuple(self):
                if self.todo:
                    n = self.todo.pop()
                    self.emit([n], msg_id=n)
                else:
                    self.finish()

        class Pass(BasicBolt):
            outputs = ["n"]

            def execute(self, tup):
                self.emit([tup[0]])

        b = TopologyBuilder()
        b.set_spout("s", Once())
        b.set_bolt("p", Pass(), 2).shuffle_grouping("s")
        with LocalCluster(workers=2) as cluster:
            status = cluster.run("no-redis", b.create_topology(), {}, timeout=60)
        assert status.state == "completed" and status.components["s"].acked == 20, status
    """)
    loaded = _loaded_after(code)
    assert "redis" not in loaded, "a LocalCluster run without Redis loaded redis"


def test_reliability_modules_import_no_io_library():
    io = {"zmq", "redis", "socket", "select", "subprocess", "threading", "os", "time", "msgpack"}
    # The window manager and its policies are protocol state machines too (bolt.py is their glue).
    pure_windowing = [PKG / "windowing" / "policies.py", PKG / "windowing" / "manager.py"]
    for path in [*(PKG / "reliability").glob("*.py"), *pure_windowing, PKG / "coordination" / "tracker.py"]:
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
        assert not names & io, f"{path.name} imports {sorted(names & io)}"


def test_module_paths_of_earlier_layouts_are_gone():
    """Only the documented paths import: an old one fails instead of aliasing a moved module."""
    old = ["local_cluster", "spark_cluster", "spouts", "components", "builder", "config", "wire", "nimbus", "faults",
           "reliability.coordinated", "drpc.coordinated", "transactional.coordinated_bolt"]
    code = ("import importlib, topology_runtime\n"
            f"for name in {old!r}:\n"
            "    try:\n        importlib.import_module('topology_runtime.' + name)\n"
            "    except ModuleNotFoundError:\n        continue\n"
            "    print(name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert not out.stdout.split(), f"old module paths still import: {out.stdout.split()}"


def test_one_coordinated_bolt_and_one_place_for_its_stream_names():
    """Transactional topologies and linear DRPC run in the same CoordinatedBolt: no other module
    builds a CoordinatedTracker, and the coordinated streams are named only in coordination/streams.py."""
    trackers, names = [], []
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        if "CoordinatedTracker(" in text and rel != "topology_runtime/coordination/bolt.py":
            trackers.append(rel)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in (
                    "COORD_STREAM", "ROWS_STREAM", "BATCH_STREAM", "COMMIT_STREAM") for t in node.targets):
                names.append(rel)
    assert not trackers, f"coordination tracked outside the CoordinatedBolt: {trackers}"
    assert set(names) == {"topology_runtime/coordination/streams.py"}, names


def test_no_module_over_500_lines():
    long = [f"{p.relative_to(ROOT)}: {n}" for p in [*PKG.rglob("*.py"), *(ROOT / "state").rglob("*.py"),
                                                      *(ROOT / "plugins").rglob("*.py")]
            if (n := len(p.read_text().splitlines())) > 500]
    assert not long, long


# --- import circles ---------------------------------------------------------------------------------

SOURCES = [PKG, ROOT / "state", ROOT / "plugins" / "topology_airflow"]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT / "plugins" if "plugins" in path.parts else ROOT).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_edges(path: Path, modules: set[str]) -> set[str]:
    """Every project module ``path`` imports: at module level, inside functions, under
    TYPE_CHECKING, and ``importlib.import_module("...")`` string constants. ``from pkg import
    name`` counts as ``pkg.name`` when that is a module, else as ``pkg``."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                names.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    out = set()
    for n in names:
        while n and n not in modules:  # a name inside a module: the module
            n = n.rpartition(".")[0]
        if n and n != me:
            out.add(n)
    return out


def test_no_import_circles():
    paths = {(_module_name(p)): p for src in SOURCES for p in src.rglob("*.py")}
    modules = set(paths)
    graph = {m: _import_edges(p, modules) for m, p in paths.items()}
    # Tarjan's strongly connected components: any with two or more modules is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_no_planning_references():
    """The repository reads whole on its own: no code, test or doc cites work-planning documents
    (issue or session numbers, seed files, paths outside the repository)."""
    import re

    pattern = re.compile(r"\b(issue|session|seed) ?#?0*\d+\b|\.\./shared|\(item \d+", re.I)
    files = [p for ext in ("py", "md", "cfg", "toml", "in") for p in ROOT.rglob(f"*.{ext}")]
    skip = {".venv", ".airflow", ".topology", "build", "node_modules", ".git"}
    hits = []
    for p in files:
        parts = p.relative_to(ROOT).parts
        if skip & set(parts) or any(part.startswith(".venv") for part in parts):
            continue
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not hits, "planning references:\n" + "\n".join(hits)
