"""Fault scenarios: real processes, killed with SIGKILL mid-operation (docs/faults.md)."""
