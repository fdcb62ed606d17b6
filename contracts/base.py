"""The base of every event model (kept apart so that event modules can import it without
importing the union of all events in `contracts.events`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

DEFERRED = ConfigDict(defer_build=True)
"""For every contract model and adapter: its validator is built when it is first used, not on
import. Building all of them cost every process that imports the contracts (each CLI command,
each service) CPU for validators most of them never use (docs/testing.md, "Where the CPU
goes"). A model whose schema is broken now fails on first use: the unit tests use them all."""


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
