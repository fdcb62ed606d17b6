"""The planner's pure core: plans, stages, dispatch decisions, rollback plans, makespans.
No IO, no asyncio, no logging; deterministic."""
