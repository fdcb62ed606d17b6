"""The step fence (decision 58) on a replicated stream: a 3-node cluster, four provisioners'
writers sending segment steps of one job at once, each step's outcome expecting its next step's
`StepClosed` subject empty and each claim its job's cancel fence. A replicated stream refuses an
expectation while another on the same subject is being replicated (10164, decision 50): the
steps must all land, those the planner ended be refused as ended (not as cancelled), and a
cancel still refuse every claim."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contracts import subjects
from contracts.events import JobPaused, StepClosed, TaskClaimed, TaskSucceeded
from muster.bus.eventstore import Append, EventStore
from muster.ports.eventlog import ConcurrencyError, StepEnded

from .test_found_bugs import _four_provisioners_on_a_cluster

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]

FENCE = "muster.evt.t.job.j.claims.0"


def _step(stores: list[EventStore], i: int, wave: int) -> tuple[asyncio.Future[int], asyncio.Future[int]]:
    """Node `n<i>`'s create done and its confirm claimed, from provisioner `i % 4`, as its core sends them."""
    done, nxt = f"n{i}.create", f"n{i}.confirm"
    outcome = Append(TaskSucceeded(job_id="j", task_id=done, attempt=wave, provisioner="p", worker="p/w0"),
                     msg_id=f"j.{done}.{wave}.outcome", lane=FENCE, step_fence=subjects.step_closed("t", "j", nxt, wave))
    claim = Append(TaskClaimed(job_id="j", task_id=nxt, attempt=wave, provisioner="p", worker="p/w0"),
                   msg_id=f"j.{nxt}.{wave}.claim.1", only_if_empty=FENCE, follows=outcome.msg_id)
    store = stores[i % 4]
    return (store.submit(subjects.task_events("t", "j", done, f"p{i % 4}"), outcome),
            store.submit(subjects.task_events("t", "j", nxt, f"p{i % 4}"), claim))


async def test_segment_steps_of_one_job_from_four_writers_on_a_replicated_stream(tmp_path: Path) -> None:
    async with _four_provisioners_on_a_cluster(tmp_path) as stores:
        # Wave 1: nothing ended; wave 2: the planner ended every third node's confirm.
        for wave in (1, 2):
            ended = {i for i in range(200) if wave == 2 and i % 3 == 0}
            for i in ended:
                await stores[0].append(subjects.step_closed("t", "j", f"n{i}.confirm", wave), [
                    Append(StepClosed(job_id="j", task_id=f"n{i}.confirm", attempt=wave), msg_id=f"closed.{i}.{wave}")])
            pairs = [_step(stores, i, wave) for i in range(200)]
            got = await asyncio.gather(*(f for pair in pairs for f in pair), return_exceptions=True)
            outcomes, claims = got[0::2], got[1::2]
            assert all(isinstance(o, int) for o in outcomes), [o for o in outcomes if not isinstance(o, int)][:2]
            refused = {i for i, c in enumerate(claims) if not isinstance(c, int)}
            assert refused == ended, f"wave {wave}: {sorted(refused ^ ended)[:5]}: {[claims[i] for i in sorted(refused ^ ended)[:2]]}"
            assert all(isinstance(claims[i], StepEnded) for i in ended)
        # The job cancelled: every claim refused as its cancel's, none as a step's end.
        await stores[0].append(FENCE, [Append(JobPaused(job_id="j", by="x"), msg_id="closes-j")])
        pairs = [_step(stores, i, 3) for i in range(40)]
        got = await asyncio.gather(*(f for pair in pairs for f in pair), return_exceptions=True)
        assert all(isinstance(o, int) for o in got[0::2])
        assert all(isinstance(c, ConcurrencyError) and not isinstance(c, StepEnded) for c in got[1::2]), got[1:4]
