"""Governance's pure core: policies (Rego, compiled and evaluated in-process), approval rules,
the cost of a plan, schedules' ticks. No IO, no asyncio, no logging; the planner's admission
and the governance service both call it."""
