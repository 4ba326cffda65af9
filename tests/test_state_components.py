"""State follows component ids: a task's state is keyed by its component and its index within
the component, so other components' parallelism never matters; a stateful component whose
parallelism changed, or that is missing from new code, is refused before anything starts
(exit 8), a renamed one starts empty, and `topology reset` removes every key."""

from __future__ import annotations

import multiprocessing

import pytest
import redis

from examples.stateful_wordcount import build, counts_in_state
from examples.wordcount import load_sentences, true_counts
from state import reset
from state.layout import REGISTRY, ctl_key, decode_component, encode_component, owner_of, parse_part, state_key
from state.namespaces import StateComponentsChanged, recorded
from state.providers import namespace, split_namespace
from topology_runtime import LocalCluster
from topology_runtime.api.exit_codes import ExitCode

CONF = {"topology.state.provider": "redis", "topology.state.checkpoint.interval.ms": 200}


def shuffled(parallelism: int = 2):
    """A word count whose stateful bolt is shuffle-grouped: its state is by task, not by key."""
    from examples.stateful_wordcount import StatefulWordCount
    from examples.wordcount import STREAM, SplitSentence
    from topology_runtime import TopologyBuilder
    from topology_runtime.connectors import RedisStreamSpout

    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamSpout(STREAM, fields=["sentence"], bounded=True), 1)
    b.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), parallelism).shuffle_grouping("split")
    return b.create_topology()


def wordcount_count3():
    """The shuffled word count with its stateful bolt at parallelism 3 (for `topology run MODULE:ATTR`)."""
    return shuffled(3)


_count3 = wordcount_count3


def _sum(a, b):
    return {w: a.get(w, 0) + b.get(w, 0) for w in set(a) | set(b)}


def _run_record(client, name):
    return client.hgetall(ctl_key(name, "run"))


def test_component_ids_encode_into_one_readable_hash_tag():
    for cid in ("count", "word.count-2", "a/b", "x{y}z", "ctl", "w*?[x]", "sp ace", "é", "%41", "a:b", "\n"):
        key = state_key("wc", cid, 7, "state")
        assert key.count("{") == 1 and key.count("}") == 1  # one hash tag, whole
        assert owner_of(key)[0] == "wc" and parse_part(owner_of(key)[1]) == (cid, 7)
        assert decode_component(encode_component(cid)) == cid
        assert split_namespace(namespace("wc", cid, 7)) == ("wc", cid, 7)
    assert state_key("wc", "count", 0, "state") == "topology:{wc:count/0}:state"  # the common case as it is
    assert encode_component("a/b") != encode_component("a%2Fb")  # injective
    assert parse_part("ctl") is None and parse_part("12") is None


@pytest.mark.slow
def test_a_stateless_components_parallelism_change_resumes_the_counts(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    name = "sc-stateless"
    truth = true_counts(load_sentences(client, 400))
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        first = cluster.submit(name, build(parallelism=2, split=1), {"redis.url": redis_url, **CONF})
        assert first.wait(120).state == "completed"
        assert recorded(client, name) == {"count": {"parallelism": 2, "key_groups": 128}}
        truth2 = true_counts(load_sentences(client, 400, seed=8))
        again = cluster.submit(name, build(parallelism=2, split=3), {"redis.url": redis_url, **CONF})
        assert again.wait(120).state == "completed", again.status().error
    # The split bolt's parallelism moved every later task number, the count's state did not move.
    assert first.plan.component_tasks["count"] != again.plan.component_tasks["count"]
    assert counts_in_state(redis_url, name, "count") == _sum(truth, truth2)  # exact: resumed, nothing lost
    assert not client.keys(f"topology:{{{name}:[0-9]*}}:*")  # nothing under task numbers


@pytest.mark.slow
def test_a_keyed_stateful_component_resumes_its_counts_on_another_parallelism(redis_url):
    """Its input fields-grouped on the word, its state keys the words: state lives by key group,
    so a resubmit with 3 tasks (then 1) finds every count where fields grouping sends the word."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    name = "sc-keyed"
    truth = true_counts(load_sentences(client, 300))
    conf = {"redis.url": redis_url, **CONF}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        assert cluster.run(name, build(parallelism=2), conf, timeout=120).state == "completed"
        for n, seed in ((3, 8), (1, 9)):
            more = true_counts(load_sentences(client, 300, seed=seed))
            truth = _sum(truth, more)
            run = cluster.submit(name, build(parallelism=n), conf)
            assert run.wait(120).state == "completed", run.status().error
            assert recorded(client, name)["count"] == {"parallelism": n, "key_groups": 128}
            assert counts_in_state(redis_url, name, "count") == truth  # exact: every count found, nothing lost
    # Every count lives in a key group; the tasks' own slots hold none.
    assert not [k for k in client.keys(f"topology:{{{name}:count/*}}:state")]


def test_a_stateful_components_parallelism_change_is_refused_before_any_worker(redis_url, capsys):
    from topology_runtime.cli.main import main
    from topology_runtime.control.control_plane import ControlPlane
    from topology_runtime.launchers import spark_driver
    from topology_runtime.launchers.spark import preflight

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    name = "sc-stateful"
    load_sentences(client, 100)
    conf = {"redis.url": redis_url, **CONF}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        assert cluster.run(name, shuffled(2), conf, timeout=120).state == "completed"
        before = _run_record(client, name)
        with pytest.raises(StateComponentsChanged) as e:
            cluster.submit(name, _count3(), conf)
        assert multiprocessing.active_children() == []  # no worker forked
    text = str(e.value)
    assert "stateful component 'count'" in text and "parallelism 2" in text and "parallelism 3" in text
    assert "not keyed by its grouping values (key '" in text  # one key its state holds
    assert f"topology reset {name}" in text and "nothing was started" in text
    assert e.value.differences == [("count", 2, 3)]
    assert _run_record(client, name) == before and not client.exists(ctl_key(name, "lease"))
    assert recorded(client, name) == {"count": {"parallelism": 2}}

    flags = ["--conf", "topology.state.provider=redis", "--conf", "topology.state.checkpoint.interval.ms=200"]
    for command in ("run", "submit"):  # submit: refused in the pre-flight, before spark-submit
        capsys.readouterr()
        rc = main([command, "test_state_components:wordcount_count3", "--name", name, "--redis", redis_url,
                   "--workers", "1", *flags])
        err = capsys.readouterr().err
        assert rc == ExitCode.REFUSED, err
        assert "'count'" in err and "parallelism 2" in err and "parallelism 3" in err and f"topology reset {name}" in err
    assert _run_record(client, name) == before
    with pytest.raises(StateComponentsChanged, match="'count'"):
        preflight(ControlPlane(redis_url), name, _count3(), conf, 1)
    # The Spark driver refuses when it takes the lease, before a Spark session exists.
    assert spark_driver.main(["--topology", "test_state_components:wordcount_count3", "--name", name,
                              "--redis", redis_url, "--workers", "1", "--conf", f"redis.url={redis_url}",
                              "--conf", "topology.state.provider=redis"]) == ExitCode.REFUSED
    assert _run_record(client, name) == before and client.zscore(REGISTRY, name) is not None


@pytest.mark.slow
def test_a_dropped_or_renamed_stateful_component(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    name = "sc-renamed"
    truth = true_counts(load_sentences(client, 300))
    conf = {"redis.url": redis_url, **CONF}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        assert cluster.run(name, build(), conf, timeout=120).state == "completed"
        old = {k: client.dump(k) for k in client.keys(f"topology:{{{name}:count[/#]*}}:*")}
        assert old and counts_in_state(redis_url, name, "count") == truth
        # Renamed in new code: refused (it would start empty while "count" keeps state) ...
        with pytest.raises(StateComponentsChanged) as e:
            cluster.submit(name, build(count="tally"), conf)
        assert "stateful component 'count' has state" in str(e.value) and "topology.state.allow.dropped" in str(e.value)
        assert e.value.differences == [("count", 2, None)]
        # ... unless allowed: "tally" starts empty, "count" keeps its state untouched.
        truth2 = true_counts(load_sentences(client, 300, seed=8))
        run = cluster.submit(name, build(count="tally"), {**conf, "topology.state.allow.dropped": True})
        assert run.wait(120).state == "completed", run.status().error
        assert counts_in_state(redis_url, name, "tally") == truth2  # nothing of "count"'s
        assert {k: client.dump(k) for k in client.keys(f"topology:{{{name}:count[/#]*}}:*")} == old
        assert recorded(client, name) == {"count": {"parallelism": 2, "key_groups": 128, "dropped": True},
                                          "tally": {"parallelism": 2, "key_groups": 128}}
        # Asked once: a later run without it and without the key goes on.
        assert cluster.run(name, build(count="tally"), conf, timeout=120).state == "completed"
    keys = client.keys(f"topology:{{{name}:*")
    assert any(":count/" in k for k in keys) and any(":tally/" in k for k in keys)
    assert reset(name, redis_url) > 0
    assert client.keys(f"topology:{{{name}:*") == [] and recorded(client, name) == {}


def test_recovery_leaves_a_dropped_components_txids_out_of_its_decision(redis_url):
    from state import RedisKeyValueState, recover
    from state.checkpoint import COMMITTED, COMMITTING, CheckPointState, load_checkpoint, save_checkpoint
    from state.namespaces import StateComponents, check

    client = redis.Redis.from_url(redis_url)
    for component in ("count", "old"):
        s = RedisKeyValueState(client, "sc-rec", component, 0)
        s.put("n", 1)
        s.prepare_commit(3)
        s.commit(3)
    for command in check(client, "sc-rec", StateComponents({"count": 1, "old": 1})):
        client.execute_command(*command)
    for command in check(client, "sc-rec", StateComponents({"count": 1}, allow_dropped=True)):
        client.execute_command(*command)  # "old" dropped: it takes no part in later checkpoints
    s = RedisKeyValueState(client, "sc-rec", "count", 0)
    s.put("n", 2)
    s.prepare_commit(4)
    save_checkpoint(client, "sc-rec", CheckPointState(4, COMMITTING))
    report = recover("sc-rec", redis_url, action="commit")
    assert report.decision == "commit" and load_checkpoint(client, "sc-rec") == CheckPointState(4, COMMITTED)
    assert {t.task: (t.dropped, t.committed_after) for t in report.tasks} == {"count/0": (False, 4), "old/0": (True, 3)}
    assert RedisKeyValueState(client, "sc-rec", "old", 0).get("n") == 1  # untouched


def test_reset_of_an_unknown_id_exits_6_and_a_dry_run_deletes_nothing(redis_url, capsys):
    from topology_runtime.cli.main import main

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    key = state_key("rs-dry", "count", 0, "state")
    client.hset(key, "a", 1)
    assert main(["reset", "rs-drx", "--redis", redis_url]) == ExitCode.NO_SUCH_RUN  # a typo
    err = capsys.readouterr().err
    assert "no topology 'rs-drx' in Redis" in err and "rs-dry" in err and "nothing deleted" in err
    assert main(["reset", "rs-dry", "--dry-run", "--redis", redis_url]) == ExitCode.COMPLETED
    assert "would delete 1 key(s) of topology 'rs-dry'" in capsys.readouterr().out and client.exists(key)
    assert main(["reset", "rs-dry", "--redis", redis_url]) == ExitCode.COMPLETED and not client.exists(key)
