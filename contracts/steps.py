"""A segment's steps' outcomes, asked of the planner by a provisioner a segment came to again
(docs/decisions/0058, item 5), on `muster.q.<tenant>.<provisioner>.steps` (`subjects.step_outcomes`).

A provisioner's bus rights name no other provisioner's task events, so it cannot read what the
provisioner lost mid-segment stored: the planner acting for the job reads the log for it, after
checking that the asker is granted the job's queue and that the steps are the job's current
attempts, queued as one segment.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .events import TaskFailed, TaskSucceeded

MAX_STEPS = 64
"""Steps one query may name (a node's run of tasks is a dozen or two)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class StepAttempt(_Wire):
    task_id: str = Field(min_length=1, max_length=400)
    attempt: int = Field(ge=1)


class StepOutcomesQuery(_Wire):
    type: Literal["StepOutcomesQuery"] = "StepOutcomesQuery"
    v: Literal[1] = 1
    job_id: str = Field(min_length=1, max_length=128)
    steps: list[StepAttempt] = Field(min_length=1, max_length=MAX_STEPS, description=(
        "the segment's steps from the message's head on, in order, each with the attempt the message carries"))


Outcome = Annotated[TaskSucceeded | TaskFailed, Field(discriminator="type")]


class StepOutcomes(_Wire):
    """The planner's answer. Only the planner acting for the job answers; silence (no such job
    there, no planner up) and `refused` leave the delivery to come again later."""

    type: Literal["StepOutcomes"] = "StepOutcomes"
    v: Literal[1] = 1
    outcomes: list[Outcome] = Field(default_factory=list, description=(
        "each step's first outcome of its attempt stored, in order, up to the first step without one (their output "
        "left out)"))
    stale: str = Field(default="", description=(
        "why the steps are not the job's current segment (an attempt since queued again, not queued as a "
        "segment, or the job an earlier one of its cluster: ended): the delivery is ended, nothing run"))
    refused: str = Field(default="", description="why the asker may not know them (not granted the job's queue)")
