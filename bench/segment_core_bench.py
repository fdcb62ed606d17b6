"""What the provisioner's pure core (`services/provisioner/domain/core.py`) costs a task of a
segment against a task sent alone: a node's first segment (create, confirm, bootstrap,
install, configure) delivered, each step claimed, run and stored in turn, against the same
five tasks each delivered as a message of its own. No server, no plugin: the decoding, the
folding of each step into the next and the actions, nothing else (docs/benchmarks.md, "Scale:
segments", session 28).

    .venv/bin/python bench/segment_core_bench.py [--segments 300] [--rounds 15]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for the project's packages when run as a script

from contracts.tasks import TaskMessage, TaskOutcome
from services.provisioner.domain.actions import Claim, WorkerConfig
from services.provisioner.domain.core import WorkerCore
from services.provisioner.plugins.testing import make_task

ACTIONS = ("create", "confirm", "bootstrap", "install", "configure")
OUTCOME = TaskOutcome(ok=True, result={"x": 1}, ipaddresses={"access": "10.0.0.1"})


def _step(action: str) -> TaskMessage:
    return make_task(action, service="s").model_copy(update={"job_id": "j", "task_id": f"n.{action}", "fence": "fence.j"})


SEGMENT = _step(ACTIONS[0]).model_copy(update={"segment": "n.create.1", "then": [_step(a) for a in ACTIONS[1:]]})
SEGMENT_BYTES = SEGMENT.model_dump_json().encode()
LONE_BYTES = [_step(a).model_dump_json().encode() for a in ACTIONS]


def _core() -> WorkerCore:
    core = WorkerCore(WorkerConfig(provisioner_id="p", capacity=64))
    core.queue_declared("t1", 30.0)
    return core


def _held(actions: list[object]) -> int:
    [claim] = [a for a in actions if isinstance(a, Claim)]
    assert isinstance(claim, Claim)
    return claim.held


def segments(core: WorkerCore, i: int) -> None:
    held = _held(list(core.delivered("t1", f"r{i}", SEGMENT_BYTES, 1, 0.0)))
    for _ in ACTIONS:
        core.claimed(held, 0.0)
        core.ran(held, OUTCOME, 0.01, now=0.0)
    core.stored(held)


def lone(core: WorkerCore, i: int) -> None:
    for k, data in enumerate(LONE_BYTES):
        held = _held(list(core.delivered("t1", f"r{i}.{k}", data, 1, 0.0)))
        core.claimed(held, 0.0)
        core.ran(held, OUTCOME, 0.01, now=0.0)
        core.stored(held)


def best(play: Callable[[WorkerCore, int], None], count: int, rounds: int) -> float:
    """The best round's µs a task (the machine is shared: the best is the least disturbed)."""
    out = float("inf")
    for _ in range(rounds):
        core = _core()
        started = time.perf_counter()
        for i in range(count):
            play(core, i)
        out = min(out, (time.perf_counter() - started) / count / len(ACTIONS) * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=300, help="segments (and five times as many lone tasks) a round")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of each; the best is shown")
    args = parser.parse_args()
    seg, alone = best(segments, args.segments, args.rounds), best(lone, args.segments, args.rounds)
    print(f"a task of a segment: {seg:.1f} µs; a task alone (the same core, the same run): {alone:.1f} µs; "
          f"{seg / alone:.2f}x")


if __name__ == "__main__":
    main()
