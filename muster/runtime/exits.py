"""Exit statuses a service process gives its supervisor (`muster up`'s, docs/operations.md)."""

STAY_DOWN_EXIT = 78
"""A process that must not be started again: a restart cannot help, and would do harm. A
provisioner whose id another process took over exits so (docs/decisions/0054): started again,
it would take the id back, the other would exit and be started again, and so on for ever. 78 is
sysexits' EX_CONFIG: two processes configured with one id is the operator's to settle."""
