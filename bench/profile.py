"""A sampling profile of one running service, for the benches: py-spy attached by PID (it
neither restarts nor slows the process much: it reads its memory 100 times a second), only
the samples of the thread holding the GIL kept (`--gil`: where the CPU goes, not where threads
wait), its stacks written as collapsed lines, and a summary of where the samples fall by function, each
function's own samples (self) and those in which it is on the stack at all (cumulative).

py-spy is a dev dependency (`pyproject.toml`); it needs the right to trace the process (root,
or `kernel.yama.ptrace_scope` 0). `summary` reads any collapsed-stack file (`py-spy record
--format raw`), so a profile taken elsewhere can be summed up the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def py_spy() -> str | None:
    """The py-spy next to this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


class Recording:
    """`py-spy record` attached to `pid` from `start()` to `stop()`, into `out` (collapsed stacks)."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        tool = py_spy()
        if tool is None:
            raise RuntimeError("py-spy is not installed (it is a dev dependency: `uv pip install py-spy` into the venv)")
        self.process = await asyncio.create_subprocess_exec(
            tool, "record", "--pid", str(self.pid), "--format", "raw", "--nolineno", "--gil", "--rate", str(self.rate),
            "--output", str(self.out), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)

    async def stop(self) -> None:
        """Ends the recording; py-spy writes its file when interrupted."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGINT)
        _, err = await self.process.communicate()
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace').strip()[-500:]}")


@dataclass(frozen=True)
class Line:
    function: str
    self_share: float
    cumulative_share: float


def stacks(path: Path) -> list[tuple[list[str], int]]:
    """The collapsed lines of a profile: (frames outermost first, samples). A line is
    `frame;frame;...;frame count`; a frame is `function (file)`."""
    out = []
    for raw in path.read_text().splitlines():
        stack, _, count_text = raw.rpartition(" ")
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        if frames and count_text.isdigit():
            out.append((frames, int(count_text)))
    return out


IDLE = ("EpollSelector.select (selectors.py)", "_worker (concurrent/futures/thread.py)")
"""Leaves that are waiting, not working: the event loop's poll, a thread pool's idle worker."""
OURS = ("(muster/", "(services/", "(contracts/")
TRUNK = 0.9
"""A project frame on more than this share of the working samples is the trunk (the service's
main, its event loop's callback): left out of the cumulative list, which would start with it."""


def summary(path: Path, top: int = 20) -> tuple[int, int, list[Line], list[Line]]:
    """(samples, working samples, the `top` of the project's functions by cumulative share,
    the `top` of all functions by their own share), shares of the working samples (waiting
    leaves, `IDLE`, left out). A function counts once per stack however deep it recurses."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = working = 0
    for frames, count in stacks(path):
        total += count
        if frames[-1] in IDLE:
            continue
        working += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count
    if not working:
        return total, 0, [], []

    def line(f: str) -> Line:
        return Line(f, own[f] / working, anywhere[f] / working)

    ours = [f for f, n in anywhere.most_common() if any(o in f for o in OURS) and n <= TRUNK * working]
    return total, working, [line(f) for f in ours[:top]], [line(f) for f, _ in own.most_common(top)]


def lines(big: dict[str, Any]) -> list[str]:
    """A scale bench's create (`scale_bench.py --profile`): where the profiled process's
    working samples fall, the project's functions by cumulative share and all by own share,
    with CPU µs per task (the share times the process's CPU seconds of the run)."""
    p = big["profile"]
    per_task = 1e6 * big["cpu_s"].get(p["process"], 0) / max(big["tasks"], 1)
    out = [f"py-spy profile of the {p['process']} during the {big['nodes']:,}-node create: {p['samples']:,} samples "
           f"(of the thread holding the GIL), {p['working']:,} working (not in the event loop's poll or an idle "
           f"pool thread); "
           f"{per_task:.0f} µs CPU per task", ""]
    for title, key in (("the project's, by cumulative share (the function and what it calls)", "cumulative"),
                       ("all, by own share", "own")):
        out += [f"Functions, {title}:", "", "| function | own | cumulative | µs per task (cumulative) |", "|---|---|---|---|"]
        out += [f"| `{x['function']}` | {100 * x['self_share']:.1f}% | {100 * x['cumulative_share']:.1f}% | "
                f"{x['cumulative_share'] * per_task:.0f} |" for x in p[key]]
        out.append("")
    return out
