"""What a Spark cluster's executors need to run a topology, shipped with the job.

Executors on a real cluster have a plain Python (same minor version as the driver) and Spark,
nothing else. For a non-``local`` master every submit ships:

* the user's code: the top-level package (or module) of the topology and every other top-level
  package or module of the user's own that it imports (found by reading the import statements,
  transitively; anything in the standard library or site-packages is not the user's), as one
  zip (``--py-files``; pure Python imports from a zip);
* the runtime (``topology_runtime``, ``state``): another zip, with compiled bytecode beside the
  sources so that executors do not compile it at every start. These two names are the runtime's
  on every node: a package of the user's with either name cannot be imported beside it (one
  interpreter has one top-level ``state``), so a submit that needs one is refused, naming both
  paths. Any other name, this project's other top-level packages (``topology_airflow``,
  ``plugins``, ...) included, is the user's when the user's code imports it from outside the
  runtime, and is shipped;
* the runtime's dependencies (pyzmq, msgpack, redis, hiredis, confluent-kafka and what they require on any
  3.11.x): native wheels cannot import from a zip, so ``pip install --target`` of the versions
  pinned in requirements.lock, packed once as a tar.gz under ``.topology/spark/`` (keyed by
  the pins, the Python version and the platform) and shipped with ``--archives ...#topology-deps``,
  which the executors put on their PYTHONPATH.

``python_env``: ``"auto"`` (the above), ``"none"`` (the nodes have the dependencies already: only
the code is shipped) or the path of the user's own archive (a venv-pack/conda-pack archive with
``bin/python``, whose interpreter the executors then use, or a tree to put on PYTHONPATH).
Executors run ``executor_python`` (default ``python3.11``, from the nodes' PATH), never this
venv's interpreter. Everything in the cache is named by a hash of its contents, so reruns reuse
it and concurrent submits do not collide; entries unused for 14 days are removed.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUNTIME_PACKAGES = ("topology_runtime", "state")
RUNTIME_DISTRIBUTIONS = ("pyzmq", "msgpack", "redis", "hiredis", "confluent-kafka")
DEPS_ALIAS = "topology-deps"
ENV_ALIAS = "topology-env"
CACHE_MAX_AGE_SECS = 14 * 86400
# Never the user's: Spark's own Python, and what every node has. The runtime's packages are told
# apart by where they are, not by name (runtime_locations).
_NOT_USER = {"pyspark", "py4j", "__future__"}


class ShippingError(RuntimeError):
    """The job's code or environment cannot be prepared (e.g. pip cannot fetch a pinned wheel)."""


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local-cluster[...]``: executors on this machine, with this venv."""
    return master.startswith("local")


def default_executor_python() -> str:
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def cache_dir() -> Path:
    """``$TOPOLOGY_HOME/.topology/spark`` (else under the working directory), like the project-local Redis."""
    return (Path(os.environ.get("TOPOLOGY_HOME") or os.getcwd()) / ".topology" / "spark").resolve()


@dataclass
class Shipment:
    """What a submit adds: py-files, archives (``path#alias``), Spark conf, and what it says about it."""

    py_files: list[str] = field(default_factory=list)
    archives: list[str] = field(default_factory=list)
    conf: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# --- the user's code -------------------------------------------------------------------------------
def _system_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return [Path(d).resolve() for d in dirs if d]


def runtime_locations() -> dict[str, Path]:
    """The directories of the runtime's own packages, as this process imports them: what the
    runtime zip holds. Not searched on ``sys.path``, where a user's package of the same name
    may come first."""
    locs = {}
    for name in RUNTIME_PACKAGES:
        module = sys.modules.get(name) or importlib.import_module(name)
        locs[name] = Path(next(iter(module.__path__))).resolve()
    return locs


def _find(name: str, search_path: list[str] | None) -> Path | None:
    """Where the first top-level module or package ``name`` on ``search_path`` is (a .py file or
    a package directory), as an import would find it; None if there is none or it is not source."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, search_path or sys.path)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package (regular or namespace)
        loc = Path(next(iter(spec.submodule_search_locations)))
    elif spec.origin and spec.origin.endswith(".py"):
        loc = Path(spec.origin)
    else:
        return None  # built-in, frozen or compiled: not shippable as source
    return loc.resolve()


def _runtime_name_clash(name: str, search_path: list[str] | None) -> ShippingError | None:
    """The user's code imports ``name``, one of the runtime's packages: fine when it finds the
    runtime's own; a package of the user's by that name is an error, since the driver and every
    executor import the runtime's under that name first, and the user's would never be seen."""
    loc = _find(name, search_path)
    runtime = runtime_locations()[name]
    if loc is None or loc == runtime:
        return None
    return ShippingError(
        f"your package {name!r} ({loc}) has the name of the runtime's own package {name!r} ({runtime}): "
        f"the driver and every executor import the runtime's, and one interpreter holds one top-level "
        f"{name!r}, so yours would never be imported there; rename yours (and its imports)")


def _top_location(name: str, search_path: list[str] | None = None, installed: bool = False) -> Path | None:
    """Where the user's top-level module or package ``name`` lives (a .py file or a package
    directory), or None when it is not the user's (standard library, site-packages unless
    ``installed``, built-in, Spark's) or cannot be found."""
    if name in _NOT_USER or name in sys.builtin_module_names or name in getattr(sys, "stdlib_module_names", ()):
        return None
    loc = _find(name, search_path)
    if loc is None:
        return None
    if any(part in ("site-packages", "dist-packages") for part in loc.parts):
        return loc if installed else None
    if any(loc.is_relative_to(d) for d in _system_dirs()):
        return None
    return loc


def _files_of(name: str, loc: Path, rest: list[str]) -> list[tuple[Path, list[str]]]:
    """(file, its package as dotted parts) for ``name.rest...`` in the tree at ``loc``: the
    package ``__init__`` files on the way and the module itself, as far as they exist (the last
    parts may name attributes, not modules)."""
    if loc.is_file():
        return [(loc, [])]
    out, here, pkg = [], loc, [name]
    if (here / "__init__.py").is_file():
        out.append((here / "__init__.py", list(pkg)))
    for part in rest:
        if (here / part).is_dir():
            here, pkg = here / part, [*pkg, part]
            if (here / "__init__.py").is_file():
                out.append((here / "__init__.py", list(pkg)))
        elif (here / f"{part}.py").is_file():
            out.append((here / f"{part}.py", list(pkg)))
            break
        else:
            break
    return out


def _imports(path: Path, pkg: list[str]) -> list[list[str]]:
    """The absolute dotted names (as parts) that ``path`` (a module of package ``pkg``) imports,
    relative imports resolved; ``from m import n`` gives ``m.n`` (n may be a module)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except SyntaxError:
        return []  # the executors report it when they import it
    out: list[list[str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(pkg):
                    continue
                base = pkg[: len(pkg) - (node.level - 1)]
            else:
                base = []
            mod = base + (node.module.split(".") if node.module else [])
            if mod:
                out += [[*mod, a.name] for a in node.names if a.name != "*"] or [mod]
    return [parts for parts in out if parts and parts[0]]


def user_code(modules: Iterable[str], extra_files: Iterable[Path] = (),
              search_path: list[str] | None = None) -> dict[str, Path]:
    """Top-level name -> location of every top-level package/module of the user's that
    ``modules`` (dotted names) import, transitively, themselves included; found on
    ``search_path`` (default ``sys.path``), as the driver will find them. The runtime's own
    packages are not the user's; a user's package named like one raises ShippingError."""
    ship: dict[str, Path] = {}
    todo: list[tuple[Path, list[str]]] = [(Path(f), []) for f in extra_files]
    for mod in modules:
        parts = mod.split(".")
        if parts[0] in RUNTIME_PACKAGES:
            if clash := _runtime_name_clash(parts[0], search_path):
                raise clash
            continue
        loc = _top_location(parts[0], search_path, installed=True)  # the topology's own: even if pip-installed
        if loc is not None:
            ship[parts[0]] = loc
            todo += _files_of(parts[0], loc, parts[1:])
    seen: set[Path] = set()
    while todo:
        path, pkg = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for parts in _imports(path, pkg):
            top = parts[0]
            if top in RUNTIME_PACKAGES:
                if clash := _runtime_name_clash(top, search_path):
                    raise clash
                continue
            loc = ship.get(top) or _top_location(top, search_path)
            if loc is None:
                continue
            ship[top] = loc
            todo += _files_of(top, loc, parts[1:])
    return ship


def topology_modules(topology: Any) -> tuple[list[str], list[Path]]:
    """The modules a topology object's components come from (pickled by reference, so the
    executors import them); for classes defined in ``__main__``, the main script's file."""
    mods, files = set(), []
    for spec in getattr(topology, "components", {}).values():
        mods.add(type(spec.template).__module__)
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if "__main__" in mods and main_file:
        files.append(Path(main_file))
    return sorted(m for m in mods if m not in ("__main__", "builtins")), files


def _code_files(locations: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(name in the zip, file) for every file of the given packages/modules, caches and dot-files left out."""
    out = []
    for name, loc in sorted(locations.items()):
        if loc.is_file():
            out.append((f"{name}.py", loc))
            continue
        for p in sorted(loc.rglob("*")):
            rel = p.relative_to(loc)
            if p.is_file() and not any(s.startswith(".") or s == "__pycache__" for s in rel.parts) \
                    and p.suffix not in (".pyc", ".pyo"):
                out.append((f"{name}/{rel.as_posix()}", p))
    return out


def _bytecode(source: bytes, name: str) -> bytes:
    """A .pyc for zipimport (the legacy name beside the source) that it loads without comparing mtimes."""
    import importlib._bootstrap_external as ext

    code = compile(source, name, "exec", dont_inherit=True, optimize=0)
    return bytes(ext._code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False))


def build_zip(kind: str, files: list[tuple[str, Path]], cache: Path, bytecode: bool = False) -> Path:
    """A zip of ``files`` in ``cache``, named by a hash of what it holds (reused when it exists)."""
    blobs = [(arc, p.read_bytes()) for arc, p in files]
    h = hashlib.sha256(b"v2 bytecode" if bytecode else b"v2")
    for arc, data in blobs:
        h.update(arc.encode() + b"\0" + hashlib.sha256(data).digest())
    path = cache / f"{kind}-{h.hexdigest()[:16]}.zip"
    if path.exists():
        os.utime(path)
        return path
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{kind}-", suffix=".zip")
    os.close(fd)
    # Directory entries too: zipimport finds a namespace package (no __init__.py) only by its entry.
    dirs = sorted({"/".join(arc.split("/")[:i]) + "/" for arc, _ in blobs for i in range(1, arc.count("/") + 1)})
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for d in dirs:
            z.writestr(zipfile.ZipInfo(d, (2020, 1, 1, 0, 0, 0)), b"")
        for arc, data in blobs:
            z.writestr(zipfile.ZipInfo(arc, (2020, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
            if bytecode and arc.endswith(".py"):
                try:
                    z.writestr(zipfile.ZipInfo(arc + "c", (2020, 1, 1, 0, 0, 0)), _bytecode(data, arc),
                               zipfile.ZIP_DEFLATED)
                except SyntaxError:
                    pass  # the executor reports it, with the source
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def runtime_zip(cache: Path) -> Path:
    files = [(arc, p) for arc, p in _code_files(runtime_locations()) if p.suffix in (".py", ".typed")]
    return build_zip("runtime", files, cache, bytecode=True)


# --- the runtime's dependencies ----------------------------------------------------------------------
def _lock_pins(lock: Path | None) -> dict[str, str]:
    pins: dict[str, str] = {}
    if lock is not None and lock.is_file():
        for line in lock.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, _, version = line.partition("==")
                pins[_norm(name.split("[")[0])] = version.strip()
    return pins


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def dependency_requirements(lock: Path | None) -> list[str]:
    """``name==version`` of the runtime's dependencies and of what they require on any Python of
    this minor version (e.g. redis needs async-timeout below 3.11.3), pinned by the lock where it
    pins them, else by the version installed here, else left to pip (``name>=x``)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    pins = _lock_pins(lock)
    env_now = {"extra": ""}
    env_old = {"extra": "", "python_full_version": f"{sys.version_info.major}.{sys.version_info.minor}.0"}
    reqs: dict[str, str] = {}
    todo = [Requirement(n) for n in RUNTIME_DISTRIBUTIONS]
    while todo:
        req = todo.pop()
        name = _norm(req.name)
        if name in reqs:
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            dist = None
        version = pins.get(name) or (dist.version if dist is not None else None)
        reqs[name] = f"{name}=={version}" if version else str(Requirement(f"{req.name}{req.specifier}"))
        for line in (dist.requires or []) if dist is not None else []:
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate(env_now) or sub.marker.evaluate(env_old):
                todo.append(sub)
    return sorted(reqs.values())


def _platform_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}-{sysconfig.get_platform()}-{platform.machine()}"


def deps_archive(cache: Path, lock: Path | None) -> tuple[Path, list[str]]:
    """The tar.gz of the runtime's dependencies (built once per set of pins; a file lock keeps
    concurrent submits from building it twice). Returns (path, requirements)."""
    reqs = dependency_requirements(lock)
    key = hashlib.sha256("\n".join([_platform_tag(), *reqs]).encode()).hexdigest()[:16]
    path = cache / f"deps-{key}.tar.gz"
    if path.exists():
        os.utime(path)
        return path, reqs
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".deps.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if path.exists():
            return path, reqs
        with tempfile.TemporaryDirectory(dir=cache, prefix=".deps-") as tmp:
            target = Path(tmp) / "site"
            cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                   "--no-deps", "--only-binary=:all:", "--target", str(target), *reqs]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise ShippingError(f"could not build the executors' environment ({' '.join(cmd)}):\n"
                                    f"{out.stderr[-3000:]}\nuse --python-env none if the nodes have "
                                    f"{', '.join(RUNTIME_DISTRIBUTIONS)} installed, or --python-env ARCHIVE")
            shutil.rmtree(target / "bin", ignore_errors=True)
            part = Path(tmp) / "deps.tar.gz"
            with tarfile.open(part, "w:gz", compresslevel=6) as tar:
                for p in sorted(target.iterdir()):
                    tar.add(p, arcname=p.name)
            os.replace(part, path)
    return path, reqs


def _archive_has_python(path: Path) -> bool:
    """Does the user's archive carry an interpreter (venv-pack, conda-pack: ``bin/python``)?"""
    try:
        if zipfile.is_zipfile(path):
            names = zipfile.ZipFile(path).namelist()
        else:
            with tarfile.open(path) as tar:
                names = tar.getnames()
    except (OSError, tarfile.TarError):
        return False
    return any(n.lstrip("./") in ("bin/python", "bin/python3") for n in names)


def prune(cache: Path, max_age: float = CACHE_MAX_AGE_SECS) -> None:
    """Remove cache entries not used (built or reused) for ``max_age`` seconds."""
    if not cache.is_dir():
        return
    now = time.time()
    for p in cache.iterdir():
        if p.is_file() and p.suffix in (".zip", ".gz") and now - p.stat().st_mtime > max_age:
            p.unlink(missing_ok=True)


# --- one submit --------------------------------------------------------------------------------------
def ship(master: str, topology: Any, python_env: str | None = "auto", executor_python: str | None = None,
         user_conf: Mapping[str, str] | None = None, deploy_mode: str | None = None, lock: Path | None = None,
         cache: Path | None = None, search_path: list[str] | None = None) -> Shipment:
    """What a submit of ``topology`` (``"module:attr"`` or a Topology object) to ``master`` must
    ship; nothing for ``local`` masters (their executors run this venv). ``user_conf`` is the
    user's Spark conf: what it sets explicitly wins. ``search_path``: where the driver will look
    for the user's modules (default ``sys.path``)."""
    out = Shipment()
    if is_local_master(master):
        return out
    user_conf = dict(user_conf or {})
    cache = cache or cache_dir()
    python_env = python_env or "auto"
    if isinstance(topology, str):
        mods, files = [topology.partition(":")[0]], []
    else:
        mods, files = topology_modules(topology)
    code = user_code(mods, files, search_path)
    missing = [m for m in mods if m.split(".")[0] not in code
               and m.split(".")[0] not in (*_NOT_USER, *RUNTIME_PACKAGES)
               and importlib.machinery.PathFinder.find_spec(m.split(".")[0], search_path or sys.path) is None]
    if missing:
        out.notes.append(f"WARNING: {', '.join(missing)} not found here: not shipped (is it on PYTHONPATH?)")
    if code:
        z = build_zip("code", _code_files(code), cache)
        out.py_files.append(str(z))
        out.notes.append(f"code: {', '.join(sorted(code))} ({z.stat().st_size / 1e3:,.0f} kB)")
    out.py_files.append(str(runtime_zip(cache)))
    interpreter = executor_python or default_executor_python()
    pythonpath: list[str] = []
    if python_env == "auto":
        archive, reqs = deps_archive(cache, lock)
        out.archives.append(f"{archive}#{DEPS_ALIAS}")
        pythonpath.append(f"./{DEPS_ALIAS}")
        out.notes.append(f"environment: {' '.join(reqs)} ({archive.stat().st_size / 1e6:.1f} MB, {archive.name})")
    elif python_env != "none":
        archive = Path(python_env).expanduser().resolve()
        if not archive.is_file():
            raise ShippingError(f"--python-env {python_env}: no such archive")
        out.archives.append(f"{archive}#{ENV_ALIAS}")
        if _archive_has_python(archive) and not executor_python:
            interpreter = f"./{ENV_ALIAS}/bin/python"
        else:
            pythonpath.append(f"./{ENV_ALIAS}")
        out.notes.append(f"environment: {archive} ({archive.stat().st_size / 1e6:.1f} MB)")
    cluster_driver = deploy_mode == "cluster"
    envs = ["spark.executorEnv."]
    if cluster_driver:  # the driver runs in the cluster too (YARN / Kubernetes cluster mode): same needs
        envs += ["spark.yarn.appMasterEnv.", "spark.kubernetes.driverEnv."]
    for prefix in envs if pythonpath else []:
        key = prefix + "PYTHONPATH"
        out.conf[key] = os.pathsep.join([*pythonpath, *([user_conf[key]] if user_conf.get(key) else [])])
    out.conf["spark.pyspark.python"] = user_conf.get("spark.pyspark.python", interpreter)
    out.conf["spark.pyspark.driver.python"] = user_conf.get(
        "spark.pyspark.driver.python", out.conf["spark.pyspark.python"] if cluster_driver else sys.executable)
    out.notes.append(f"executors run {out.conf['spark.pyspark.python']}")
    prune(cache)
    return out


__all__ = ["Shipment", "ShippingError", "ship", "is_local_master", "user_code", "deps_archive", "runtime_zip",
           "runtime_locations", "default_executor_python", "cache_dir"]
