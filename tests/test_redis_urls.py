"""The Redis URL forms of docs/redis.md, parsed by state.connection: Sentinel and Cluster
URLs, passwords, several hosts; clear errors naming the part at fault and never the password.
No server needed (a Sentinel client connects only when used)."""

from __future__ import annotations

import pytest

from state.connection import RedisURL, RedisURLError, connect, connect_async, parse, redacted
from state.layout import hash_tag, same_slot
from state.replication import Replication
from topology_runtime.api.config import ConfigError, resolve_config, state_replication


def test_sentinel_url_with_password_hosts_service_and_db():
    u = parse("redis+sentinel://:s3cret@10.0.0.1:26379,sentinel-b:26380,[::1]/mymaster/3")
    assert u == RedisURL("redis+sentinel", (("10.0.0.1", 26379), ("sentinel-b", 26380), ("::1", 26379)),
                         None, "s3cret", "mymaster", 3)


def test_sentinel_url_user_encoded_password_default_db():
    u = parse("redis+sentinel://app:p%40ss%2Fw@h1/svc")
    assert (u.username, u.password, u.service, u.db, u.hosts) == ("app", "p@ss/w", "svc", 0, (("h1", 26379),))


def test_cluster_url_hosts_and_db_zero():
    u = parse("redis+cluster://:pw@127.0.0.1:7000,127.0.0.1:7001")
    assert u == RedisURL("redis+cluster", (("127.0.0.1", 7000), ("127.0.0.1", 7001)), None, "pw")
    assert parse("redis+cluster://n1/0").hosts == (("n1", 6379),)
    assert parse("redis+cluster://n1/").db == 0


def test_plain_urls_are_redis_pys():
    for url in ("redis://localhost:6379/0", "rediss://:pw@h:6380/1", "unix:///tmp/redis.sock?db=2"):
        assert parse(url) is None


@pytest.mark.parametrize("url, fault", [
    ("redis+cluster://:hunter2@n1:7000/2", "db 0 only"),
    ("redis+sentinel://:hunter2@h1:26379", "no service name"),
    ("redis+sentinel://:hunter2@h1:26379/", "no service name"),
    ("redis+sentinel://:hunter2@h1:26379/svc/x", "database 'x' is not a number"),
    ("redis+sentinel://:hunter2@h1:26379/svc/1/2", "expected /SERVICE_NAME or /SERVICE_NAME/db"),
    ("redis+sentinel://:hunter2@h1:port/svc", "port 'port' is not a number"),
    ("redis+sentinel://:hunter2@h1:0/svc", "port '0' is not a number from 1 to 65535"),
    ("redis+cluster://:hunter2@n1:7000,:7001", "address ':7001' has no host"),
    ("redis+cluster://:hunter2@", "no cluster node address"),
    ("redis+cluster://:hunter2@[::1:7000", "is not [ipv6]:port"),
    ("redis+cluster://:hunter2@n1:7000?timeout=3", "no query string"),
    ("mysql://:hunter2@db/1", "scheme 'mysql'; expected one of redis://"),
    ("localhost:6379", "no scheme"),
])
def test_bad_urls_name_the_part_at_fault_without_the_password(url, fault):
    with pytest.raises(RedisURLError) as e:
        parse(url)
    assert fault in str(e.value)
    assert "hunter2" not in str(e.value) and "Redis URL" in str(e.value)
    with pytest.raises(RedisURLError):
        connect(url)  # the one factory refuses it too


def test_redacted():
    assert redacted("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert redacted("redis://user:p@ss@h/0") == "redis://user:***@h/0"
    assert redacted("redis://user@h/0") == "redis://user@h/0"
    assert redacted("redis+sentinel://:pw@a:1,b:2/mymaster/1") == "redis+sentinel://:***@a:1,b:2/mymaster/1"
    assert redacted("redis+cluster://n1:7000,n2:7000") == "redis+cluster://n1:7000,n2:7000"
    assert redacted("unix:///run/redis.sock?db=1&password=pw") == "unix:///run/redis.sock?db=1&password=***"
    assert redacted("not a url") == "not a url"


def test_sentinel_client_carries_the_parts():
    client = connect("redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/svc/4", socket_timeout=3)
    pool = client.connection_pool
    assert pool.service_name == "svc"
    assert pool.connection_kwargs["password"] == "pw" and pool.connection_kwargs["db"] == 4
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in sentinels] == [("127.0.0.1", 1), ("127.0.0.1", 2)]
    kw = sentinels[0].connection_pool.connection_kwargs
    assert kw.get("password") is None and kw["socket_timeout"] == 3  # the password is the master's


def test_hash_tags():
    assert hash_tag("topology:{wc:3}:state") == "wc:3"
    assert hash_tag("word-counts") is None and hash_tag("a{}b") is None and hash_tag("a{b") is None
    assert same_slot("word-counts", ":writers") == "{word-counts}:writers"
    assert same_slot("counts:{t}", ":writers") == "counts:{t}:writers"


def test_min_replicas_config():
    conf = resolve_config({"topology.state.redis.min.replicas": 1})
    assert state_replication(conf) == (1, 2000)
    assert not Replication(*state_replication(resolve_config({})))
    assert state_replication(resolve_config({"topology.state.redis.wait.timeout.ms": 500,
                                             "topology.state.redis.min.replicas": 0})) == (0, 500)
    with pytest.raises(ConfigError, match="min.replicas"):
        resolve_config({"topology.state.redis.min.replicas": -1})
    with pytest.raises(ConfigError, match="wait.timeout.ms"):
        resolve_config({"topology.state.redis.wait.timeout.ms": 0})


def test_a_rediss_url_with_ssl_parameters_builds_a_tls_connection_pool():
    """docs/security.md's TLS form, as every client of a run builds it (nothing connects yet):
    TLS connections that require the server's certificate, from the CA file named."""
    import ssl

    import redis

    url = "rediss://app:pw@redis.internal:6380/2?ssl_cert_reqs=required&ssl_ca_certs=/etc/ca.pem&ssl_check_hostname=true"
    pool = connect(url).connection_pool
    assert pool.connection_class is redis.SSLConnection
    conn = pool.make_connection()
    assert (conn.host, conn.port, conn.db, conn.username) == ("redis.internal", 6380, 2, "app")
    assert (conn.cert_reqs, conn.ca_certs, conn.check_hostname) == (ssl.CERT_REQUIRED, "/etc/ca.pem", True)
    assert "pw" not in redacted(url)
    aio_pool = connect_async(url).connection_pool
    assert aio_pool.connection_class.__name__ == "SSLConnection"
    assert aio_pool.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem"
