"""Exit codes have one definition (topology_runtime/api/exit_codes.py): the docs' table says the
same, and the CLI and the Spark driver return its members, not bare numbers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from topology_runtime.api.exit_codes import ExitCode
from topology_runtime.api.status import RunStatus

ROOT = Path(__file__).resolve().parent.parent


def _docs_table() -> list[tuple[int, str]]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^\| (\d+) \| `(\w+)` \|", section, re.M)]


def test_the_docs_table_is_the_enum():
    assert _docs_table() == [(c.value, c.name) for c in ExitCode]


def test_numbers_scripts_rely_on_do_not_move():
    assert [int(c) for c in ExitCode] == list(range(12))
    assert (ExitCode.COMPLETED, ExitCode.FAILED, ExitCode.KILLED, ExitCode.INVALID, ExitCode.REDIS_UNAVAILABLE) \
        == (0, 1, 2, 4, 9)
    assert [RunStatus("x", s).exit_code for s in ("completed", "failed", "killed", "running")] == [0, 1, 2, 3]


def test_cli_and_driver_return_members_not_numbers():
    """A bare ``return 4`` in a command or the driver is a second definition of what 4 means."""
    for rel in ("topology_runtime/cli/main.py", "topology_runtime/launchers/spark_driver.py"):
        tree = ast.parse((ROOT / rel).read_text())
        bare = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Return)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int]
        assert not bare, f"{rel}: bare exit codes at lines {bare}"


def _subcommands() -> list[str]:
    import argparse

    from topology_runtime.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [a.dest for a in sub._choices_actions]


def test_every_subcommand_is_in_the_docs_command_table_and_the_architecture():
    """The command table of docs/operations.md has one row per subcommand the parser has, in its
    order; docs/architecture.md's CLI row names them all."""
    commands = _subcommands()
    assert {"run", "submit", "pause", "savepoint-delete", "dead-letters", "drpc", "redis"} <= set(commands)
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("### Commands", 1)[1].split("\n#", 1)[0]
    assert re.findall(r"^\| `topology ([a-z-]+)[ `]", section, re.M) == commands
    row = next(line for line in (ROOT / "docs" / "architecture.md").read_text().splitlines()
               if line.startswith("| CLI |"))
    listed = row.split("`topology ", 1)[1].split("`", 1)[0]
    assert [c.strip() for c in listed.split("/")] == commands
