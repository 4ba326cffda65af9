"""Settings follow the topology: a topology's own conf (create_topology(conf=...)) under the
run's, and the state settings an id's committed state was written with, checked before any
later run of the id starts (refused naming the setting; `topology reset` starts over)."""

from __future__ import annotations

import pytest
import redis
from spark_topologies import STREAM, SplitSentence

from examples.stateful_wordcount import StatefulWordCount, counts_in_state
from examples.wordcount import load_sentences, true_counts
from state import reset
from state.layout import REGISTRY, ctl_key
from state.settings import StateSettingsChanged, recorded
from topology_runtime import LocalCluster, TopologyBuilder
from topology_runtime.api.config import ConfigError
from topology_runtime.api.exit_codes import ExitCode
from topology_runtime.connectors import RedisStreamReplaySpout

EO = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
      "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 5,
      "topology.max.spout.pending": 100}


def eo_wordcount(conf=None):
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=True, batch_size=50), 1)
    b.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("split", ["word"])
    return b.create_topology(conf=conf)


def eo_wordcount_with_conf():
    """The module-level form a `topology run|submit MODULE:ATTR` loads: its settings inside."""
    return eo_wordcount(EO)


def test_a_topology_carries_its_conf_and_the_runs_conf_overrides_it(redis_url):
    own = {"topology.message.timeout.secs": 60, "app.greeting": "hello", "topology.workers": 1}
    topology = eo_wordcount(own)
    assert topology.conf == own
    with LocalCluster(workers=2) as cluster:
        plain = cluster.submit("own-conf", topology, {"redis.url": redis_url})
        plain.wait(60)
        over = cluster.submit("own-conf-2", topology, {"redis.url": redis_url, "topology.message.timeout.secs": 45})
        over.wait(60)
    assert plain.plan.conf["topology.message.timeout.secs"] == 60 and plain.plan.conf["app.greeting"] == "hello"
    assert plain.plan.workers == 1  # the topology's topology.workers over the launcher's default
    assert over.plan.conf["topology.message.timeout.secs"] == 45 and over.plan.conf["app.greeting"] == "hello"
    assert topology.conf == own  # a run never changes the topology's own


@pytest.mark.parametrize("conf, key", [
    ({"topology.state.provder": "redis"}, "topology.state.provder"),
    ({"topology.message.timeout.secs": -1}, "topology.message.timeout.secs"),
])
def test_a_bad_key_in_create_topology_is_refused_naming_it(conf, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        eo_wordcount(conf)


def test_exactly_once_alone_in_the_topology_waits_for_the_runs_provider():
    topology = eo_wordcount({"topology.state.exactly.once": True})  # the run may give the provider
    assert topology.conf == {"topology.state.exactly.once": True}


def _started(client, name):
    return client.hget(ctl_key(name, "run"), "started"), client.hget(ctl_key(name, "run"), "token")


@pytest.mark.slow
def test_state_settings_follow_the_state(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    name = "eo-settings"
    truth = true_counts(load_sentences(client, 300))
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        first = cluster.run(name, eo_wordcount(), {"redis.url": redis_url, **EO}, timeout=120)
        assert first.state == "completed"
        assert recorded(client, name) == {
            "topology.state.provider": "redis", "topology.state.exactly.once": True,
            "topology.state.provider.config (its Redis)": None,
            "topology.state.provider.config.keySerializer": None,
            "topology.state.provider.config.valueSerializer": None}
        before = _started(client, name)

        # The defect: without the flags the resubmit read the whole stream again into memory.
        with pytest.raises(StateSettingsChanged) as e:
            cluster.submit(name, eo_wordcount(), {"redis.url": redis_url})
        text = str(e.value)
        assert "topology.state.provider: the state was written with \"redis\", this run gives \"memory\"" in text
        assert "topology.state.exactly.once" in text and f"topology reset {name}" in text
        assert "--conf topology.state.provider=redis" in text
        assert _started(client, name) == before and not client.exists(ctl_key(name, "lease"))
        assert cluster.runs[name] is not None and cluster.runs[name].done  # still the first run

        # The topology carrying its settings: resubmitted without any, it resumes its state.
        truth2 = true_counts(load_sentences(client, 200, seed=8))
        again = cluster.submit(name, eo_wordcount_with_conf(), {"redis.url": redis_url})
        assert again.wait(120).state == "completed"
    both = {w: truth.get(w, 0) + truth2.get(w, 0) for w in set(truth) | set(truth2)}
    assert counts_in_state(redis_url, name, "count") == both

    assert reset(name, redis_url) > 0 and recorded(client, name) is None
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:  # after a reset: any settings
        assert cluster.run(name, eo_wordcount(), {"redis.url": redis_url}, timeout=120).state == "completed"
    assert recorded(client, name) is None  # memory state outlives nothing: no record


def test_without_the_control_plane_the_runs_redis_holds_the_record(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    load_sentences(client, 50)
    with LocalCluster(workers=1) as cluster:
        cluster.run("eo-noctl", eo_wordcount(), {"redis.url": redis_url, **EO}, timeout=120)
        with pytest.raises(StateSettingsChanged, match="topology.state.provider"):
            cluster.submit("eo-noctl", eo_wordcount(), {"redis.url": redis_url})


def test_cli_and_spark_preflight_refuse_with_exit_code_8(redis_url, capsys):
    from topology_runtime.cli.main import main
    from topology_runtime.control.control_plane import ControlPlane
    from topology_runtime.launchers import spark_driver
    from topology_runtime.launchers.spark import preflight

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    load_sentences(client, 50)
    name = "eo-cli"
    with LocalCluster(workers=1, redis_url=redis_url) as cluster:
        cluster.run(name, eo_wordcount(), {"redis.url": redis_url, **EO}, timeout=120)
    ref = "test_topology_conf:eo_wordcount"
    for command in ("run", "submit"):  # submit: refused before spark-submit starts
        capsys.readouterr()
        assert main([command, ref, "--name", name, "--redis", redis_url, "--workers", "1"]) == ExitCode.REFUSED
        err = capsys.readouterr().err
        assert "topology.state.provider" in err and f"topology reset {name}" in err, err
    assert client.zscore(REGISTRY, name) is not None and not client.exists(ctl_key(name, "lease"))

    control = ControlPlane(redis_url)
    with pytest.raises(StateSettingsChanged, match="topology.state.exactly.once"):
        preflight(control, name, eo_wordcount(), {"redis.url": redis_url, "topology.state.provider": "redis"}, 1)
    plan = preflight(control, name, eo_wordcount_with_conf(), {"redis.url": redis_url}, 1)
    assert plan.exactly_once
    # The driver refuses when it takes the lease, before a Spark session exists.
    assert spark_driver.main(["--topology", ref, "--name", name, "--redis", redis_url, "--workers", "1",
                              "--conf", f"redis.url={redis_url}"]) == ExitCode.REFUSED
    assert "topology.state.provider" in capsys.readouterr().out
    assert not client.exists(ctl_key(name, "lease"))
