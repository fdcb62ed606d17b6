"""The processes `muster up` starts end with it, however it ends.

A `muster up` stopped by Ctrl-C or SIGTERM stops its children itself. One killed outright (kill -9,
the OOM killer, a closed terminal's SIGHUP that its handler never sees) cannot: its children went
on headless, their stderr a broken pipe (no more log lines), holding the data directory's lock
and ports until someone killed them by pid. On Linux the kernel can send a child a signal when
its parent dies (`prctl(PR_SET_PDEATHSIG)`): each child asks for SIGTERM, which every service and
nats-server take as "stop cleanly".

The "parent" the kernel watches is the thread that forked: children are spawned from the event
loop's thread, which lives as long as `muster up`. Elsewhere (not Linux) there is no such call and
children outlive a killed `muster up`, as before; `muster down` stops them by pid.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1

_prctl = None
if sys.platform == "linux":
    # Looked up once here: between fork and exec only the call itself may run.
    _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl


def end_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGTERM when this process dies (None: not Linux)."""
    if _prctl is None:
        return None
    prctl, parent = _prctl, os.getpid()

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the call: no signal will come
            os._exit(1)

    return in_child
