"""The base of every event model (kept apart so that event modules can import it without
importing the union of all events in `contracts.events`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

DEFERRED = ConfigDict(defer_build=True)
"""For every contract model and adapter: its validator is built when it is first used, not on
import. Building all of them took ~0.2 s of CPU in each process that imports the contracts,
and a CLI command or a service uses a few of them (docs/decisions/0013-contracts-build-on-first-use.md)."""


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
