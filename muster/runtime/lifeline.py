"""The processes `muster up` starts end with it, however it ends.

A `muster up` stopped by Ctrl-C or SIGTERM stops its children itself. One killed outright (kill -9,
the OOM killer) cannot: its children went on headless, their stderr a broken pipe, holding the data
directory's lock and ports until someone killed them by pid. On Linux the kernel can send a process
a signal when its parent dies (`prctl(PR_SET_PDEATHSIG)`), and the setting survives `exec`. So each
child is started through `lifeline()`: a short Python program that asks for SIGTERM (which every
service and nats-server take as "stop cleanly"), checks that its parent is still the one that
started it, and execs the real command in its place (same pid).

Not a `preexec_fn`: Python code between fork and exec can deadlock in a process with threads
(`muster up` has several), and a child stuck there never started (seen as "did not start within
30 s"). The kernel's "parent" is the thread that forked: children are spawned from the event
loop's thread, which lives as long as `muster up`. Elsewhere than Linux the prefix is empty and
children outlive a killed `muster up`, as before; `muster down` stops them by pid.
"""

from __future__ import annotations

import os
import sys

_PROGRAM = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)  # the parent died before the call: no signal would come\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def lifeline() -> list[str]:
    """The argv to put before a child's own: it ends when this process dies ([] when not Linux)."""
    if sys.platform != "linux":
        return []
    return [sys.executable, "-I", "-S", "-c", _PROGRAM, str(os.getpid())]
