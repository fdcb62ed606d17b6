"""The cluster's `nodes` map on the wire: stored once per version, by content, in the KV bucket
`nodemaps`; a task message carries only the key of its manifest (`TaskMessage.nodes_ref`).

The map is cut into chunks of the nodes whose `nodenum // CHUNK_NODES` is the same (new nodes
of an expand land in new chunks, a node whose address changes rewrites only its own chunk).
Each chunk and the manifest that lists them are stored under `<tenant>.<sha256 of the JSON>`
(first 32 hex digits), so a provisioner caches them for as long as it likes: a key never
names anything else. docs/provisioner.md, "The nodes map".
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .tasks import NodeInfo

BUCKET = "nodemaps"
CHUNK_NODES = 64
KEY_DIGITS = 32


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class NodeChunk(_Wire):
    type: Literal["NodeChunk"] = "NodeChunk"
    v: Literal[1] = 1
    nodes: dict[str, NodeInfo]


class NodeManifest(_Wire):
    type: Literal["NodeManifest"] = "NodeManifest"
    v: Literal[1] = 1
    cluster_id: str
    count: int = Field(ge=0, description="nodes in the map")
    chunks: list[str] = Field(description="keys of the chunks, in chunk order")


def content_key(tenant: str, data: bytes) -> str:
    return f"{tenant}.{hashlib.sha256(data).hexdigest()[:KEY_DIGITS]}"


def chunk_of(nodenum: int) -> int:
    return nodenum // CHUNK_NODES
