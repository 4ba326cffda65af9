"""resolve_config(): Storm key names, our defaults, and the check of unknown keys (docs/configuration.md)."""

from __future__ import annotations

import logging

import pytest

from topology_runtime import Config, ConfigError
from topology_runtime.api.config import resolve_config

LOGGER = "topology_runtime.api.config"


def test_defaults():
    c = resolve_config(None)
    assert c["topology.message.timeout.secs"] == 30
    assert c["topology.enable.message.timeouts"] is True
    assert c["topology.acker.executors"] is None
    assert c["topology.max.spout.pending"] is None
    assert c["topology.workers"] == 1
    assert c["topology.state.provider"] == "memory"
    assert resolve_config({}) == c


@pytest.mark.parametrize("key", ["topology.foo", "topology.mesage.timeout.secs", "topology.workers.count"])
def test_unknown_topology_key_is_an_error_naming_it(key):
    with pytest.raises(ConfigError) as e:
        resolve_config({key: 1})
    assert repr(key) in str(e.value)
    assert "unknown config key" in str(e.value)


@pytest.mark.parametrize("key", ["topology.kryo.register", "topology.tasks", "topology.worker.childopts"])
def test_storm_key_not_implemented_is_accepted_with_a_warning(key, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        c = resolve_config({key: ["x"]})
    assert c[key] == ["x"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and key in r.getMessage()]
    assert len(warnings) == 1
    assert "does not implement" in warnings[0].getMessage()


def test_implemented_keys_do_not_warn(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        resolve_config({"topology.message.timeout.secs": 5, "topology.debug": True})
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_user_keys_pass_through_unchanged():
    payload = {"nested": [1, 2]}
    conf = {"my.app.setting": payload, "db_url": "sqlite://", "topologyish": 0, "TOPOLOGY.FOO": "x"}
    c = resolve_config(conf)
    assert c["my.app.setting"] is payload
    assert c["db_url"] == "sqlite://"
    assert c["topologyish"] == 0
    assert c["TOPOLOGY.FOO"] == "x"


def test_input_mapping_is_not_mutated():
    conf = Config({"topology.workers": 2.0})
    c = resolve_config(conf)
    assert c["topology.workers"] == 2 and isinstance(c["topology.workers"], int)
    assert conf == {"topology.workers": 2.0}


def test_config_setters_use_storm_names():
    conf = Config()
    conf.set_num_workers(3)
    conf.set_num_ackers(0)
    conf.set_message_timeout_secs(12)
    conf.set_max_spout_pending(100)
    conf.set_debug(True)
    c = resolve_config(conf)
    assert c[Config.TOPOLOGY_WORKERS] == 3
    assert c[Config.TOPOLOGY_ACKER_EXECUTORS] == 0
    assert c[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS] == 12
    assert c[Config.TOPOLOGY_MAX_SPOUT_PENDING] == 100
    assert c[Config.TOPOLOGY_DEBUG] is True


def test_workers_argument_overrides_conf():
    assert resolve_config({"topology.workers": 2}, workers=5)["topology.workers"] == 5


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("topology.workers", 0, "must be > 0"),
        ("topology.workers", "abc", "expected a number"),
        ("topology.workers", -2, "must be > 0"),
        ("topology.workers", 1.5, "expected an integer"),
        ("topology.workers", True, "expected a number"),
        ("topology.acker.executors", -1, "must be >= 0"),
        ("topology.acker.executors", "two", "expected a number"),
        ("topology.message.timeout.secs", 0, "must be > 0"),
        ("topology.message.timeout.secs", "30", "expected a number"),
        ("topology.max.spout.pending", 0, "must be > 0"),
        ("topology.enable.message.timeouts", "maybe", "expected true/false"),
        ("topology.debug", 2, "expected true/false"),
        ("topology.tick.tuple.freq.secs", -1, "must be > 0"),
        ("topology.transactional.progress.secs", 0, "must be > 0"),
        ("topology.transactional.progress.secs", "ten", "expected a number"),
        ("topology.state.provider", "postgres", "expected 'memory' or 'redis'"),
    ],
)
def test_bad_values_name_the_key(key, value, problem):
    with pytest.raises(ConfigError) as e:
        resolve_config({key: value})
    assert repr(key) in str(e.value)
    assert problem in str(e.value)


def test_bad_workers_argument_names_the_key():
    with pytest.raises(ConfigError, match="'topology.workers'"):
        resolve_config({}, workers=0)


def test_valid_values_are_normalised():
    c = resolve_config({
        "topology.acker.executors": 0,
        "topology.enable.message.timeouts": "false",
        "topology.max.spout.pending": 8.0,
        "topology.message.timeout.secs": 0.5,
        "topology.state.provider": "redis",
    })
    assert c["topology.acker.executors"] == 0
    assert c["topology.enable.message.timeouts"] is False
    assert c["topology.max.spout.pending"] == 8 and isinstance(c["topology.max.spout.pending"], int)
    assert c["topology.message.timeout.secs"] == 0.5
    assert c["topology.state.provider"] == "redis"


def test_non_string_key_is_rejected():
    with pytest.raises(ConfigError, match="keys must be strings"):
        resolve_config({1: "x"})
