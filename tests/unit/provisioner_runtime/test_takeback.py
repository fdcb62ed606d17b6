"""Whether a refused presence write was replaced by another process of the id, or read a lagging
replica (docs/decisions/0054, `services/provisioner/takeback.py`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest
from nats.js.api import RawStreamMsg
from nats.js.errors import BadRequestError

from contracts.tasks import ProvisionerInfo, ProvisionerPresence
from services.provisioner.presence import Presence, StaleRead
from services.provisioner.takeback import Read, leader_last, take_back

MINE, EARLIER, LATER = "s-mine", "s-earlier", "s-later"


def test_the_leader_s_last_sequence_is_read_from_the_refusal() -> None:
    assert leader_last("wrong last sequence: 42") == 42  # (nats-server's words, checked on a real one)
    assert leader_last("wrong last sequence: 0") == 0
    assert leader_last("something else") is None and leader_last(None) is None


def test_a_lagging_replica_s_record_of_the_earlier_process_is_no_replacement() -> None:
    # Ours is at 10; our record expired (marker at 12): a follower still holds the record of the
    # process this one took the id over from (at 5). Before: taken for a replacement, for good.
    assert take_back(MINE, 10, 12, Read(5, EARLIER)) == "stale"
    assert take_back(MINE, 10, None, Read(5, EARLIER)) == "stale"  # (no sequence named: ours is the bound)
    assert take_back(MINE, 10, 12, Read(10, MINE)) == "stale"  # (our own last, behind the leader)
    assert take_back(MINE, 10, 12, Read(None, None)) == "stale"  # (the replica holds nothing yet)


def test_another_session_s_record_at_or_after_the_leader_s_last_is_a_replacement() -> None:
    assert take_back(MINE, 10, 12, Read(12, LATER)) == "replaced"
    assert take_back(MINE, 10, 12, Read(14, LATER)) == "replaced"  # (written again since the refusal)
    assert take_back(MINE, 10, None, Read(11, LATER)) == "replaced"


def test_a_marker_a_delete_or_our_own_unacknowledged_write_is_written_over() -> None:
    assert take_back(MINE, 10, 12, Read(12, None)) == 12  # an expiry marker or a delete
    assert take_back(MINE, 10, 11, Read(11, MINE)) == 11  # our write stored, its acknowledgement lost
    assert take_back(MINE, 10, 0, Read(None, None)) is None  # a bucket made anew: nothing there
    assert take_back(MINE, 10, 0, Read(7, EARLIER)) is None  # (the leader's word counts, not a replica's)
    assert take_back(MINE, 10, None, Read(None, None)) is None


class Replica:
    """A bus whose leader refuses the write (its last is at 12) and whose direct get is answered
    by a follower that lags: it still holds the record of the process this one replaced."""

    def __init__(self, stale: ProvisionerPresence) -> None:
        self.stale = stale

    def jetstream(self) -> Replica:
        return self

    async def publish(self, subject: str, data: bytes, **_: Any) -> Any:
        raise BadRequestError(code=400, err_code=10071, description="wrong last sequence: 12")

    async def get_last_msg(self, stream: str, subject: str, direct: bool = False) -> RawStreamMsg:
        return RawStreamMsg(subject=subject, seq=5, data=self.stale.model_dump_json().encode(), headers={})


def _info(session: str) -> ProvisionerInfo:
    return ProvisionerInfo(id="p1", session=session, host="h", pid=1, capacity=1, provisioner_class="default",
                           tenants=["t"], plugins=[], started_at=datetime.now(UTC))


async def test_a_provisioner_that_reads_a_lagging_replica_is_not_replaced_and_tries_again() -> None:
    earlier = ProvisionerPresence(info=_info(EARLIER), in_flight=0, completed=0, draining=False, ttl_s=15,
                                  refreshed_at=datetime.now(UTC))
    told: list[ProvisionerInfo] = []
    presence = Presence(cast(Any, Replica(earlier)), cast(Any, None), _info(MINE), lambda: (0, 0, False))
    presence.on_replaced = told.append
    presence._last_seq, presence._bucket_ready = 10, True  # (its own last acknowledged write)
    with pytest.raises(StaleRead, match="older than the leader's last"):
        await presence.refresh()
    assert not presence.replaced and told == []
    assert await presence._write() is False and not presence.replaced  # (the refresher tries again)
