"""The planner service: accepts operations, plans them, drives their tasks and folds the results
(docs/planner.md; docs/architecture.md follows one create through it)."""
