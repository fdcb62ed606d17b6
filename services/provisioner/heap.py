"""The heap of a started provisioner, taken out of the cyclic garbage collector's sweeps.

A busy provisioner allocates a few dozen short-lived objects per task (the task, its events,
futures, frames), so the collector runs often, and each full collection walked every object
the process holds: the modules, the plugins, pydantic's schemas, everything loaded at start
and alive until exit. Measured in bench/dispatch_bench.py (capacity 16, no-op tasks): the
collector took 60-80 us of CPU per task, and a full collection stalled the event loop for
~80 ms at a time while 32 tasks waited on it. `gc.freeze()` after start moves what is alive
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
