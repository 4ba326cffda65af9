"""A module that imports only where ``TOPOLOGY_TEST_DRIVER=1`` is set (the submitting machine in
tests/test_spark_standalone.py): on the cluster's executors importing it raises, as a module
that is missing there or breaks on import would."""

from __future__ import annotations

import os

from topology_runtime import Spout

if os.environ.get("TOPOLOGY_TEST_DRIVER") != "1":
    raise ImportError("planted: tests.driver_only imports only on the driver")


class DriverOnlySpout(Spout):
    outputs = ["n"]

    def next_tuple(self):
        self.finish()
