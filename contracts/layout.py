"""Cluster layouts: what the solver produces and the planner turns into nodes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class LayoutGroup(_Wire):
    """`count` nodes that share hardware, image and services. Services are sorted by name."""

    hardwaretype: str
    imagetype: str
    services: list[str]
    count: int = Field(ge=1)


class Layout(_Wire):
    """A cluster layout: groups in preference order. This is also the JSON printed by
    `muster solve` and read by `muster solve --existing`."""

    nodes: int = Field(ge=0)
    layout: list[LayoutGroup]


class NodeSpec(_Wire):
    """One node of a cluster as the planner knows it (layout, not runtime results)."""

    id: str = Field(pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)
    hardwaretype: str
    imagetype: str
    services: list[str]
    hostname: str = ""
    nodenum: int = 0
    flavor: str = ""
    image: str = ""
    sshuser: str = ""
