"""The worker: one OS process running its tasks' executors in one event loop (``worker``), the
executors that implement the collectors users call (``bolt_executor``, ``spout_executor``,
``acker_executor``), what executors may ask of their worker (``port``), routing, checkpoints
and barriers (``checkpoints``), task state (``task_state``) and blocking calls off the loop
(``offloop``)."""
