"""The counts a job's progress stream sends are kept as events come, not composed at each:
they must be what the composed status says, at every event of random stories."""

from __future__ import annotations

import random
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from contracts.records import Recorded
from muster.readmodel.progress import JobProgress

sys.path.append(str(Path(__file__).parent))
from test_story import START, job_story


def composed(progress: JobProgress) -> dict[str, object] | None:
    status = progress.status()
    if status is None:
        return None
    return {k: status[k] for k in ("counts", "tasks_total", "stage", "state")}


@pytest.mark.parametrize("seed", range(150))
def test_each_summary_counts_as_the_composed_status(seed: int) -> None:
    rnd = random.Random(seed)
    _, story = job_story(rnd, seed)
    progress = JobProgress()
    for seq, (subject, event) in enumerate(story, 1):
        r = Recorded(seq=seq, subject=subject, time=START + timedelta(seconds=seq), event=event)
        step = progress.apply(r)
        if event.type == "TaskProgressed":
            continue
        expected = composed(progress)
        got = None if expected is None else {k: step[k] for k in ("counts", "tasks_total", "stage", "state")}
        assert got == expected, (seed, seq, event.type)


def test_a_stream_from_the_first_event_does_not_compose_the_status_at_each(monkeypatch: pytest.MonkeyPatch) -> None:
    composed_calls: list[int] = []

    def counted(self: JobProgress) -> None:
        composed_calls.append(1)

    monkeypatch.setattr(JobProgress, "status", counted)
    story = next(s for s in (job_story(random.Random(seed), seed)[1] for seed in range(100)) if len(s) > 15)
    progress = JobProgress()
    for seq, (subject, event) in enumerate(story, 1):
        progress.apply(Recorded(seq=seq, subject=subject, time=START + timedelta(seconds=seq), event=event))
    assert composed_calls == []
