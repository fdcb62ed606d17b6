"""The pool service's routing tables: everything it listens to, in one place.

`ROUTES`: the durable consumer on the log (requesters' facts, `muster.evt.<tenant>.poolreq.…`)
and which handler takes each event type; every pool service joins the queue group
`pool-requests`, so each fact reaches one of them (they are fenced on the pool's subject); the
durable delivers on `muster.deliver.pool-requests`, so pool services under several identities
share it (docs/pools.md).
`REPLIES`: the request/reply subjects it answers, queue group `pools`. The pool service also
*reads* the pools' own subjects (its aggregates, rebuilt at start and caught up on demand).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts import subjects
from muster.routing import Route

REQUESTS = "pool-requests"

ROUTES = (
    Route(REQUESTS, subjects.ALL_POOL_REQUEST_EVENTS, {
        "PoolHostsRequested": "on_request_event",
        "PoolRequestCancelled": "on_request_event",
        "PoolNodesReported": "on_request_event",
        "PoolDynamicHostCreated": "on_request_event",
        "PoolRequestClosed": "on_request_event",
    }, queue=REQUESTS, deliver=subjects.POOL_REQUESTS_DELIVERY),
)


@dataclass(frozen=True)
class Reply:
    subject: str
    handler: str
    """The entrypoint's answer for the subject (commands, or the list of pools)."""
    queue: str = "pools"


REPLIES = (
    Reply(subjects.ALL_POOL_COMMANDS, "on_command"),  # muster.pool.<principal>.<pool>.<verb>
    Reply(subjects.ALL_POOL_LISTS, "on_list"),  # muster.pools.<principal>
)
