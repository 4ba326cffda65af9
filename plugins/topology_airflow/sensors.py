"""TopologySensor: wait for a topology run to reach a condition, reading the Redis control plane."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from .hooks import TopologyHook

CONDITIONS = ("running", "completed", "failed", "txid")
TXID_KINDS = ("any", "checkpoint", "transactional")
_ENDED = ("completed", "killed", "failed", "lost")


class TopologySensor(BaseSensorOperator):
    """Wait until run ``name`` satisfies ``condition``:

    * ``"running"``: the run is running (a run that already completed counts: it ran);
    * ``"completed"`` / ``"failed"``: the run ended in that state;
    * ``"txid"``: the last committed txid is at least ``txid``; ``txid_kind`` says which:
      ``"checkpoint"`` (stateful bolts: ``topology:{ID:ctl}:checkpoint``), ``"transactional"``
      (the transactional coordinator's current txid minus one, ``state.transactional.current_txid``;
      ``tx_id`` defaulting to ``name``) or ``"any"`` (either).

    Fails at once, rather than waiting for its timeout, when the run ended in a way that can no
    longer satisfy the condition (waiting for running/completed/txid and the run failed, was
    killed or was lost; waiting for failed and it completed). A run that is not registered yet is
    waited for. The failure skips retries (AirflowFailException): an ended run stays ended.
    Default ``mode="reschedule"``: no worker slot is held between pokes.
    """

    template_fields: Sequence[str] = ("name", "condition", "txid", "redis_url")
    ui_color = "#eef8e8"

    def __init__(self, *, name: str, condition: str = "running", txid: int | str | None = None,
                 txid_kind: str = "any", tx_id: str | None = None, redis_url: str | None = None,
                 mode: str = "reschedule", poke_interval: float = 10.0, **kwargs: Any) -> None:
        super().__init__(mode=mode, poke_interval=poke_interval, **kwargs)
        self.name = name
        self.condition = condition
        self.txid = txid
        self.txid_kind = txid_kind
        self.tx_id = tx_id
        self.redis_url = redis_url
        if "{{" not in str(condition):  # a templated condition is checked when poked
            self._check_arguments()

    def _check_arguments(self) -> None:
        if self.condition not in CONDITIONS:
            raise ValueError(f"TopologySensor: unknown condition {self.condition!r}; "
                             f"expected one of {', '.join(CONDITIONS)}")
        if self.txid_kind not in TXID_KINDS:
            raise ValueError(f"TopologySensor: unknown txid_kind {self.txid_kind!r}; "
                             f"expected one of {', '.join(TXID_KINDS)}")
        if self.condition == "txid" and self.txid is None:
            raise ValueError("TopologySensor: condition 'txid' needs txid=N (wait until txid >= N)")

    def poke(self, context: Any) -> bool:
        self._check_arguments()
        hook = TopologyHook(redis_url=self.redis_url)
        rec = hook.get_run(self.name)
        if rec is None:
            self.log.info("topology %r: no run registered yet", self.name)
            return False
        state = rec.state
        error = (rec.status or {}).get("error")
        if self.condition == "txid":
            want = int(self.txid)  # type: ignore[arg-type]
            txids = hook.committed_txids(self.name, self.tx_id)
            kinds = ("checkpoint", "transactional") if self.txid_kind == "any" else (self.txid_kind,)
            have = [t for t in (txids[k] for k in kinds) if t is not None]
            self.log.info("topology %r is %s; committed txids %s; waiting for txid >= %d", self.name, state,
                          txids, want)
            if have and max(have) >= want:
                return True
            if state in _ENDED:
                raise AirflowFailException(f"topology {self.name!r} ended {state} before committing txid {want}"
                                       + (f": {error}" if error else ""))
            return False
        self.log.info("topology %r is %s; waiting for %s", self.name, state, self.condition)
        if state == self.condition or (self.condition == "running" and state == "completed"):
            return True
        if state in _ENDED:
            raise AirflowFailException(f"topology {self.name!r} ended {state}; it will never be {self.condition}"
                                   + (f": {error}" if error else ""))
        return False
