"""The heap of a started provisioner, taken out of the cyclic garbage collector's sweeps.

A busy provisioner allocates a few dozen short-lived objects per task (the task, its events,
futures, frames), so the collector runs often, and each full collection walked every object
the process holds: the modules, the plugins, pydantic's schemas, everything loaded at start
and alive until exit, stalling the event loop while tasks waited on it (figures: decision 12,
addendum). `gc.freeze()` after start moves what is alive
then to a generation no collection walks; objects still die by reference count as before,
and only a reference cycle among them would stay in memory.
"""

from __future__ import annotations

import gc


def freeze_started_heap() -> None:
    """Collect once, then leave everything alive now out of later collections (call when the
    process has started up, before it takes tasks)."""
    gc.collect()
    gc.freeze()
