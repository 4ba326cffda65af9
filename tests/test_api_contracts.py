"""The component base classes' actions as editors and type checkers see them: real signatures that
match what the runtime binds, a clear error when called before it does, and the packages marked
typed (PEP 561) in the source tree and in what setuptools ships."""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import pytest
import topology_airflow

import state
import topology_runtime
from topology_runtime import BasicBolt, Bolt, Spout
from topology_runtime.api.components import StatefulBolt
from topology_runtime.worker.bolt_executor import BoltExecutor
from topology_runtime.worker.spout_executor import SpoutExecutor

ROOT = Path(__file__).resolve().parent.parent
SPOUT_ACTIONS = {"emit", "emit_direct", "finish", "finish_input"}
BOLT_ACTIONS = {"emit", "emit_direct", "emitter", "router", "chunk_emitter", "ack", "fail", "reset_timeout",
                "run_off_loop"}


def _actions(cls: type) -> dict[str, str]:
    """{public method of ``cls`` that raises the not-started error: that error's message}."""
    found = {}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if name.startswith("_"):
            continue
        params = list(inspect.signature(fn).parameters.values())[1:]
        args = [None for p in params if p.default is p.empty]
        try:
            fn(cls(), *args)
        except RuntimeError as e:
            if "before the runtime started this task" in str(e):
                found[name] = str(e)
        except Exception:  # noqa: BLE001 - a callback's own default (ReplayableSpout.snapshot)
            pass
    return found


def _shape(fn: object) -> list[tuple[str, object, object]]:
    """Parameters without self: name, kind, default (annotations differ by design)."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind, p.default) for p in params]


@pytest.mark.parametrize("base, executor, expected", [(Spout, SpoutExecutor, SPOUT_ACTIONS),
                                                      (Bolt, BoltExecutor, BOLT_ACTIONS)])
def test_declared_actions_are_the_ones_the_runtime_binds_with_the_same_parameters(base, executor, expected):
    assert set(_actions(base)) == expected
    for name in expected:
        declared = getattr(base, name)
        assert declared.__doc__, f"{base.__name__}.{name} has no docstring"
        assert _shape(declared) == _shape(getattr(executor, name)), f"{base.__name__}.{name}"


@pytest.mark.parametrize("cls", [Spout, Bolt, BasicBolt, StatefulBolt])
def test_an_action_called_before_the_task_starts_names_the_class_and_method(cls):
    class Mine(cls):
        pass

    for name, message in _actions(Mine).items():
        assert message.startswith(f"Mine.{name}() called before the runtime started this task"), message


def test_the_runtime_binding_shadows_the_declared_action():
    class Counter(Bolt):
        def execute(self, tup):
            self.emit([tup])

    bolt = Counter()
    sent = []
    bolt.emit = lambda values, anchors=None, stream="default": sent.append(values) or [7]
    bolt.execute(1)
    assert sent == [[1]]
    assert "emit" in vars(bolt)  # an instance attribute: one lookup, no wrapper frame


def test_packages_are_marked_typed_and_ship_the_marker():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for pkg in (topology_runtime, state, topology_airflow):
        assert (Path(pkg.__file__).parent / "py.typed").is_file(), pkg.__name__
        assert "py.typed" in package_data.get(pkg.__name__, []), pkg.__name__
