"""Key groups: fields grouping and keyed state agree on where a key lives, a task owns a
contiguous range of groups, and a change of parallelism hands groups over without moving data.
Real Redis (the session's); no workers."""

from __future__ import annotations

import random

import pytest

from state import StateError
from state.keyed_state import KeyGroupedState, component_state
from state.keygroups import group_range, key_hash, moved_groups, task_of_group
from state.layout import group_part, owner_of, parse_group_part, slot_key
from state.namespaces import StateComponents, StateComponentsChanged, check, recorded, register_namespaces
from topology_runtime.worker.routing import fields_picker


@pytest.mark.parametrize("groups", [1, 7, 128])
def test_every_group_has_exactly_one_owner_and_ranges_are_contiguous(groups):
    for n in range(1, groups + 1):
        seen = []
        for i in range(n):
            r = group_range(i, n, groups)
            assert len(r) >= 1 and all(task_of_group(g, n, groups) == i for g in r)
            seen.extend(r)
        assert seen == list(range(groups))
    with pytest.raises(ValueError):
        group_range(0, groups + 1, groups)


def test_a_rescale_hands_over_whole_groups_only_where_owners_change():
    # 2 -> 4: task 0 keeps [0, 32); [32, 64) goes to task 1, [64, 96) and [96, 128) to tasks 2, 3.
    assert moved_groups(128, 2, 4) == 96
    assert moved_groups(128, 4, 2) == 96
    assert moved_groups(128, 3, 3) == 0


@pytest.mark.parametrize("fields", [1, 2])
def test_fields_grouping_routes_a_key_to_the_task_that_owns_its_group(fields):
    rng = random.Random(7)
    tasks = [11, 12, 13]
    pick = fields_picker(tasks, tuple(range(1, fields + 1)), key_groups=16)
    for _ in range(2000):
        key = [rng.choice([f"w{rng.randrange(500)}", rng.randrange(10**6), -3, 2.5]) for _ in range(fields)]
        state_key = key[0] if fields == 1 else key
        owner = task_of_group(key_hash(state_key, fields) % 16, 3, 16)
        assert pick(["x", *key]) == [tasks[owner]]


def test_more_tasks_than_groups_falls_back_to_the_hash_modulo_tasks():
    pick = fields_picker([1, 2, 3, 4], (0,), key_groups=2)
    assert {pick([f"k{i}"])[0] for i in range(200)} == {1, 2, 3, 4}


def test_group_parts_are_their_own_hash_tags():
    key = slot_key("wc", group_part("count#1", 17), "state")
    assert key == "topology:{wc:count%231#17}:state"
    assert owner_of(key) == ("wc", "count%231#17") and parse_group_part("count%231#17") == ("count#1", 17)


def _open(client, name, index, n, groups=16, token=None):
    return KeyGroupedState.open(client, name, "count", index, group_range(index, n, groups), groups, 1, token=token)


def test_keyed_state_survives_a_rescale_without_moving_data(redis_client):
    name = "kg-rescale"
    words = [f"w{i}" for i in range(3000)]
    two = [_open(redis_client, name, i, 2) for i in range(2)]
    for w in words:  # each word to the task owning its group, as fields grouping sends it
        two[task_of_group(key_hash(w, 1) % 16, 2, 16)].put(w, len(w))
    two[0].put("total", 1)  # outside task 0's groups or inside: either way it lives somewhere
    for st in two:
        st.prepare_commit(1)
        st.commit(1)
    before = {k: redis_client.hlen(k) for k in redis_client.scan_iter(match="topology:{kg-rescale:*}:state")}
    # 2 -> 4: every task sees exactly the keys of its groups; Redis holds the same hashes.
    four = [_open(redis_client, name, i, 4) for i in range(4)]
    for i, st in enumerate(four):
        mine = {k for k, _ in st}
        assert all(task_of_group(key_hash(k, 1) % 16, 4, 16) == i for k in mine if k != "total")
        for w in words:
            if task_of_group(key_hash(w, 1) % 16, 4, 16) == i:
                assert st.get(w) == len(w)
    assert {k: redis_client.hlen(k) for k in redis_client.scan_iter(match="topology:{kg-rescale:*}:state")} == before
    # One round trip per protocol step, whatever the number of groups.
    for st in four:
        st.put("w1", 99) if task_of_group(key_hash("w1", 1) % 16, 4, 16) == four.index(st) else None
        st.prepare_commit(2)
        st.commit(2)
    register_namespaces(redis_client, name, "count", 4, 16)
    entries = dict(component_state(redis_client, name, "count"))
    assert entries["w1"] == 99 and len(entries) == len(words) + 1


def test_rollback_drops_every_groups_prepared_writes(redis_client):
    st = _open(redis_client, "kg-rollback", 0, 1)
    st.put("a", 1)
    st.prepare_commit(1)
    st.commit(1)
    st.put("a", 2)
    st.put("b", 3)
    st.prepare_commit(2)
    st.rollback()
    assert st.get("a") == 1 and st.get("b") is None
    again = _open(redis_client, "kg-rollback", 0, 1)
    assert again.get("a") == 1 and again.prepared_txid is None and again.committed_txid == 1
    with pytest.raises(StateError):
        again.prepare_commit(1)


def test_a_stale_run_is_fenced_on_every_group(redis_client):
    from state.fencing import Fenced

    old = _open(redis_client, "kg-fence", 0, 1, token=5)
    old.put("a", 1)
    _open(redis_client, "kg-fence", 0, 1, token=6)  # a newer run claims every slot of the task
    with pytest.raises(Fenced):
        old.prepare_commit(1)


def _record(client, name, components):
    for command in check(client, name, components):
        client.execute_command(*command)


def test_the_launch_check_allows_a_keyed_rescale_and_names_a_key_that_cannot_follow(redis_client):
    name = "kg-check"
    _record(redis_client, name, StateComponents({"count": 2}, key_groups={"count": 16}))
    sts = [_open(redis_client, name, i, 2) for i in range(2)]
    for st in sts:
        for w in ("a", "b", "c", "d"):
            if st.part_of(w) is not st.own:
                st.put(w, 1)
        st.prepare_commit(1)
        st.commit(1)
    _record(redis_client, name, StateComponents({"count": 4}, key_groups={"count": 16}))
    assert recorded(redis_client, name)["count"] == {"parallelism": 4, "key_groups": 16}
    # A key outside the task's groups is the task's own: it cannot follow a key, refused.
    st = _open(redis_client, name, 0, 4)
    outside = next(w for w in (f"x{i}" for i in range(100)) if st.part_of(w) is st.own)
    st.put(outside, 7)
    st.prepare_commit(2)
    st.commit(2)
    with pytest.raises(StateComponentsChanged) as e:
        check(redis_client, name, StateComponents({"count": 2}, key_groups={"count": 16}))
    assert "'count'" in str(e.value) and repr(outside) in str(e.value) and "parallelism 4" in str(e.value)
    # Other key groups, or no longer keyed: refused, naming the setting.
    with pytest.raises(StateComponentsChanged, match="topology.state.key.groups=32"):
        check(redis_client, name, StateComponents({"count": 4}, key_groups={"count": 32}))
    with pytest.raises(StateComponentsChanged, match="not fields-grouped"):
        check(redis_client, name, StateComponents({"count": 4}))
    assert recorded(redis_client, name)["count"] == {"parallelism": 4, "key_groups": 16}  # nothing changed


def test_the_number_of_key_groups_is_a_checked_setting():
    from topology_runtime.api.config import ConfigError, resolve_config

    assert resolve_config({"topology.state.key.groups": 64})["topology.state.key.groups"] == 64
    with pytest.raises(ConfigError, match="topology.state.key.groups"):
        resolve_config({"topology.state.key.groups": 0})


def test_the_runtimes_own_keys_never_go_to_a_key_group(redis_client):
    st = _open(redis_client, "kg-reserved", 0, 1)  # one task: it owns every group
    assert st.part_of("__window") is st.own and st.part_of("w1") is not st.own


@pytest.mark.parametrize("kind", ["keyed", "plain"])
def test_writes_after_each_checkpoint_commit_in_the_next(redis_client, kind):
    """A write after a prepare belongs to the next checkpoint; a rollback drops what was not
    prepared and committed."""
    from state import RedisKeyValueState

    name = f"kg-after-{kind}"

    def fresh():
        if kind == "keyed":
            return _open(redis_client, name, 0, 1)
        return RedisKeyValueState(redis_client, name, "count", 0)

    st = fresh()
    st.put("a", 1)
    st.prepare_commit(1)
    st.commit(1)
    st.put("b", 2)
    st.prepare_commit(2)
    st.put("c", 3)  # after a prepare, before its commit: the next checkpoint's
    st.commit(2)
    st.put("d", 4)
    st.rollback()  # drops d (never prepared) and c (not prepared yet)
    st.put("e", 5)
    st.prepare_commit(3)
    st.commit(3)
    again = fresh()
    assert {k: again.get(k) for k in "abcde"} == {"a": 1, "b": 2, "c": None, "d": None, "e": 5}
