"""The run supervisor: one per run, whatever the launcher. It owns the control endpoint the
workers connect to and decides what happens to the run (see ``run_supervisor``)."""
