"""Whether a provisioner whose presence write was refused may write over what is there now, must
read again, or was replaced by another process of its id (docs/decisions/0054). Pure: the
caller reads.

A session writes only over its own last record (`Nats-Expected-Last-Subject-Sequence`). When the
server refuses a write, it names the key's last sequence *at the stream's leader* ("wrong last
sequence: N"); the record is then read by a direct get, which any replica may answer, a lagging
follower too. What such a follower holds may be older than the provisioner's own last write: a
record of the process it took the id over from, which is no evidence of a newer one. So another
session's record counts as a replacement only when it is at or after the leader's last
sequence (or, when the refusal did not name it, after this session's last acknowledged write).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_WRONG_LAST = re.compile(r"wrong last sequence: (\d+)")


def leader_last(description: str | None) -> int | None:
    """The key's last sequence at the leader, from a refusal's description (None: not named)."""
    found = _WRONG_LAST.search(description or "")
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Read:
    """What a direct get of the key answered."""

    seq: int | None
    """The message's stream sequence (None: the replica holds no message for the key)."""
    session: str | None
    """The session of the record there (None: a delete or expiry marker, or no message)."""


Verdict = int | None | Literal["stale", "replaced"]


def take_back(own_session: str, own_last: int | None, leader: int | None, read: Read) -> Verdict:
    """The sequence to write over next (None: write unconditionally), `stale` (the read is behind
    the leader: read again later) or `replaced` (another session's record, newer than ours)."""
    if leader == 0:
        return None  # the leader holds nothing for the key (a bucket made anew)
    if read.seq is None:
        return "stale" if leader is not None else None
    current = read.seq >= leader if leader is not None else own_last is None or read.seq > own_last
    if not current:
        return "stale"
    if read.session is not None and read.session != own_session:
        return "replaced"
    return read.seq  # an expiry marker, a delete, or our own write whose acknowledgement was lost
