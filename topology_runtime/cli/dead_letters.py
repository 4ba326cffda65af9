"""``topology dead-letters ID [--replay] [--component C]``: list what the streams spouts of a
topology gave up on, or put it back into its source stream once (connectors/dead_letters.py)."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable

from ..api.exit_codes import ExitCode

_FIELDS_SHOWN = 200  # characters of an entry's fields printed per line


def add_parser(sub: argparse._SubParsersAction, redis_of: Callable[[argparse.Namespace], str]) -> None:
    """The subcommand; ``redis_of(args)`` resolves the Redis URL as every other command does."""
    d = sub.add_parser("dead-letters", help="list the entries a topology's stream spouts gave up on "
                                            "(reason, failures); --replay puts them back into their stream once")
    d.add_argument("id")
    d.add_argument("--replay", action="store_true",
                   help="put each failed entry back into its source stream (once, even when run twice) "
                        "and remove it from the dead-letter list")
    d.add_argument("--component", metavar="C", help="only this spout component")
    d.add_argument("--redis")
    d.set_defaults(func=functools.partial(cmd_dead_letters, redis_of=redis_of))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def cmd_dead_letters(args: argparse.Namespace, redis_of: Callable[[argparse.Namespace], str]) -> int:
    from state.connection import connect
    from state.recovery import is_known, unknown_message

    from ..connectors import dead_letters as dl

    client = connect(redis_of(args))
    try:
        found = dl.sources(client, args.id)
        if not found and not is_known(client, args.id):
            print(f"topology: {unknown_message(client, args.id)}", file=sys.stderr)
            return ExitCode.NO_SUCH_RUN
        if args.component is not None:
            if args.component not in found:
                have = ", ".join(found) or "none"
                print(f"topology: no spout component {args.component!r} with dead letters in topology {args.id!r} "
                      f"(components with dead letters: {have})", file=sys.stderr)
                return ExitCode.INVALID
            found = {args.component: found[args.component]}
        if not found:
            print(f"{args.id}: no spout registered a dead-letter list (RedisStreamSpout does when it opens)")
            return ExitCode.COMPLETED
        for src in found.values():
            if args.replay:
                _replay(client, src)
            else:
                _list(client, src)
    finally:
        client.close()
    return ExitCode.COMPLETED


def _list(client, src) -> None:
    from ..connectors import dead_letters as dl

    letters = list(dl.entries(client, src))
    print(f"{src.component}: {src.spout or 'spout'} on stream {src.stream!r}, dead-letter list {src.list_key!r}: "
          f"{_plural(len(letters), 'dead letter')}")
    for e in letters:
        fails = "-" if e.fails is None else str(e.fails)
        body = json.dumps(e.fields, ensure_ascii=False) if e.fields is not None else e.raw.decode(errors="replace")
        if len(body) > _FIELDS_SHOWN:
            body = body[:_FIELDS_SHOWN] + "..."
        print(f"  {e.id or '?'}  fails {fails}  {e.reason}  {body}")


def _replay(client, src) -> None:
    from ..connectors import dead_letters as dl

    rep = dl.replay(client, src)
    print(f"{src.component}: put {_plural(len(rep.replayed), 'dead letter')} back into stream {src.stream!r}"
          + (f"; removed {len(rep.already)} put back by an earlier replay" if rep.already else "")
          + (f"; {len(rep.kept)} left in {src.list_key!r} (not replayable: fix and XADD by hand)" if rep.kept else ""))
    for old, new in rep.replayed:
        print(f"  {old} -> {new}")
    for mid, why in rep.kept:
        print(f"  left {mid}: {why}")
