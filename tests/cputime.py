"""CPU per test, for finding what makes the suite long (docs/testing.md, "Where the CPU goes").

Off unless asked: `pytest -p tests.cputime ...` with `MUSTER_CPUTIME=<file>`. Each test's
setup, call and teardown is timed as one: wall clock, and CPU (user + sys) of this process and
of its children that ended and were waited for (RUSAGE_CHILDREN: a service, CLI command or
nats-server counts when it is reaped, with every grandchild it reaped itself). A module's
fixture is counted with the test whose setup or teardown started or stopped it, so a file's sum
is right where a test's share of its module's set-up is not. The workers' sessions (collection,
the session's nats-server) are counted at their end as `<worker>`, the whole run (workers and
all) as `<whole run>`. Every worker appends lines `nodeid<TAB>wall<TAB>cpu_self
<TAB>cpu_children<TAB>end<TAB>worker` (`end`: the epoch second it ended) to the file;
`python -m tests.cputime <file>` adds them up by file, and says when each worker's last test
ended and which tests ended last (the run's tail: what a worker did while the others idled).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _write(nodeid: str, wall: float, own: float, children: float) -> None:
    out = os.environ.get("MUSTER_CPUTIME")
    if out:
        with open(out, "a") as f:
            f.write(f"{nodeid}\t{wall:.3f}\t{own:.3f}\t{children:.3f}\t{time.time():.3f}\t{os.environ.get('PYTEST_XDIST_WORKER', '-')}\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    wall, (own, children) = time.monotonic(), _cpu()
    yield
    own2, children2 = _cpu()
    _write(item.nodeid, time.monotonic() - wall, own2 - own, children2 - children)


_START: list[tuple[float, float, float]] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _START.append((time.monotonic(), *_cpu()))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _START:
        wall, own, children = _START[0]
        own2, children2 = _cpu()
        # the controller of pytest-xdist reaps its workers: its children are the whole run
        name = "<worker>" if hasattr(config, "workerinput") else "<whole run>"
        _write(name, time.monotonic() - wall, own2 - own, children2 - children)


def summary(path: Path, top: int = 40) -> str:
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    tests: list[tuple[float, str, float]] = []
    session: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    ends: list[tuple[float, str, str, float]] = []
    for line in path.read_text().splitlines():
        nodeid, wall, own, children, *when = line.split("\t")
        w, o, c = float(wall), float(own), float(children)
        if when and not nodeid.startswith("<"):
            ends.append((float(when[0]), when[1], nodeid, w))
        if nodeid.startswith("<"):
            session[nodeid] = [session[nodeid][0] + w, session[nodeid][1] + o, session[nodeid][2] + c]
            continue
        row = by_file[nodeid.split("::")[0]]
        row[0] += w
        row[1] += o
        row[2] += c
        row[3] += 1
        tests.append((o + c, nodeid, w))
    total = sum(r[1] + r[2] for r in by_file.values())
    lines = [f"tests' CPU {total:.0f} s"]
    lines += [f"{name}: CPU {o + c:.0f} s, wall {w:.0f} s" for name, (w, o, c) in sorted(session.items())]
    lines.append("")
    lines.append(f"{'cpu':>7} {'self':>6} {'child':>6} {'wall':>6} {'n':>4}  file")
    for name, (w, o, c, n) in sorted(by_file.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:top]:
        lines.append(f"{o + c:7.1f} {o:6.1f} {c:6.1f} {w:6.1f} {int(n):4d}  {name}")
    lines += ["", f"{'cpu':>7} {'wall':>6}  test"]
    for cpu, nodeid, w in sorted(tests, reverse=True)[:top]:
        lines.append(f"{cpu:7.1f} {w:6.1f}  {nodeid}")
    if ends:
        last = max(e[0] for e in ends)
        lines += ["", "each worker's last test ended, seconds before the run's last:"]
        lines += [f"  {worker}: {last - max(e[0] for e in ends if e[1] == worker):6.1f}" for worker in sorted({e[1] for e in ends})]
        lines += ["", f"the last {top // 2} tests to end (seconds before the end, worker, wall):"]
        lines += [f"{last - end:6.1f} {worker:>4} {w:6.1f}  {nodeid}" for end, worker, nodeid, w in sorted(ends)[-(top // 2):]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40))
