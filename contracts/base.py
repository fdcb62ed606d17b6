"""The base of every event model (kept apart so that event modules can import it without
importing the union of all events in `contracts.events`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
