"""The plan: a validated topology expanded to tasks, with system components added and tasks
assigned to workers. Deterministic."""

from .planner import ACKER, Plan, Subscription, build_plan, direct_subscribers, replan

__all__ = ["ACKER", "Plan", "Subscription", "build_plan", "direct_subscribers", "replan"]
