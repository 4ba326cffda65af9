"""RotatingMap (Storm's utils/RotatingMap): bucketed expiry without a timer per entry."""

from __future__ import annotations

import pytest

from topology_runtime.reliability.rotating_map import RotatingMap


def _rotations_survived(m: RotatingMap, key, limit: int = 10) -> int:
    """Rotate until ``key`` falls out; return how many rotations it survived."""
    for n in range(limit):
        dead = m.rotate()
        if key in dead:
            assert key not in m
            return n
        assert key in m
    raise AssertionError(f"{key!r} never expired")


def test_needs_at_least_two_buckets():
    with pytest.raises(ValueError, match="at least 2 buckets"):
        RotatingMap(1)
    assert len(RotatingMap(2)) == 0


def test_put_get_remove_contains_len():
    m = RotatingMap(3)
    assert len(m) == 0
    assert "a" not in m
    assert m.get("a") is None
    assert m.get("a", "dflt") == "dflt"

    m.put("a", 1)
    m.put("b", 2)
    assert len(m) == 2
    assert "a" in m and "b" in m
    assert m.get("a") == 1 and m.get("b") == 2

    m.put("a", 10)  # overwrite: still one entry
    assert len(m) == 2
    assert m.get("a") == 10

    assert m.remove("a") == 10
    assert "a" not in m
    assert len(m) == 1
    assert m.remove("a") is None
    assert m.remove("a", "gone") == "gone"
    assert dict(m.items()) == {"b": 2}


def test_falsy_values_are_entries():
    m = RotatingMap(2)
    m.put("z", 0)
    m.put("n", None)
    assert "z" in m and "n" in m
    assert m.get("z", "dflt") == 0
    assert len(m) == 2


def test_put_moves_key_to_head_bucket_and_out_of_the_others():
    m = RotatingMap(3)
    m.put("k", "old")
    m.rotate()
    m.rotate()  # "k" now sits in the oldest bucket
    m.put("k", "new")
    assert len(m) == 1
    assert list(m.items()) == [("k", "new")]
    # The next rotation drops the oldest bucket, which must no longer hold "k".
    assert m.rotate() == {}
    assert m.get("k") == "new"
    # Re-put key lives in the head bucket: it is the last of three to expire.
    m.put("a", 1)
    m.rotate()
    m.put("b", 2)
    assert m.rotate() == {"k": "new"}


def test_rotate_returns_and_reports_exactly_the_oldest_bucket():
    expired: list[tuple] = []
    m = RotatingMap(3, on_expire=lambda k, v: expired.append((k, v)))
    m.put("a", 1)
    m.rotate()
    m.put("b", 2)
    m.put("b2", 22)
    m.rotate()
    m.put("c", 3)
    assert expired == []

    assert m.rotate() == {"a": 1}
    assert expired == [("a", 1)]
    assert set(dict(m.items())) == {"b", "b2", "c"}

    assert m.rotate() == {"b": 2, "b2": 22}
    assert sorted(expired) == [("a", 1), ("b", 2), ("b2", 22)]

    assert m.rotate() == {"c": 3}
    assert m.rotate() == {}  # empty bucket: nothing returned, nothing reported
    assert len(expired) == 4
    assert len(m) == 0


def test_removed_entries_are_not_reported():
    expired: list = []
    m = RotatingMap(2, on_expire=lambda k, v: expired.append(k))
    m.put("a", 1)
    m.remove("a")
    m.rotate()
    m.rotate()
    assert expired == []


@pytest.mark.parametrize(("buckets", "survives"), [(2, 1), (3, 2), (5, 4)])
def test_untouched_entry_expires_on_rotation_number_buckets(buckets, survives):
    m = RotatingMap(buckets)
    m.put("k", "v")
    assert _rotations_survived(m, "k") == survives


def test_three_buckets_survives_two_rotations_expires_on_third():
    expired: list = []
    m = RotatingMap(3, on_expire=lambda k, v: expired.append((k, v)))
    m.put("k", "v")
    m.rotate()
    m.rotate()
    assert "k" in m and expired == []
    assert m.rotate() == {"k": "v"}
    assert expired == [("k", "v")]


def test_two_buckets_expires_on_second_rotation():
    m = RotatingMap(2)
    m.put("k", "v")
    assert m.rotate() == {}
    assert "k" in m
    assert m.rotate() == {"k": "v"}
    assert "k" not in m


@pytest.mark.parametrize("buckets", [2, 3])
def test_reput_refreshes_lifetime(buckets):
    m = RotatingMap(buckets)
    m.put("k", 1)
    for _ in range(buckets - 1):
        m.rotate()
    m.put("k", 2)  # would have expired on the next rotation
    assert _rotations_survived(m, "k") == buckets - 1


def test_get_and_contains_do_not_refresh():
    m = RotatingMap(3)
    m.put("k", 1)
    m.rotate()
    assert m.get("k") == 1
    assert "k" in m
    m.rotate()
    assert m.rotate() == {"k": 1}
