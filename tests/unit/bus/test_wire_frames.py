"""What `wire` and the event store make of raw frames: header blocks, ack reply subjects, and an
event decoded from the wire exactly as from a nats-py message."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.catalog import Action
from contracts.events import TaskQueued
from muster.bus.eventstore import Append, _decode, _from_wire
from muster.bus.protocol import ack_sequences, header, parse_headers


def _block(headers: dict[str, str], status: str = "") -> bytes:
    return (f"NATS/1.0{' ' + status if status else ''}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()


def test_a_header_block_gives_its_status_and_fields() -> None:
    assert parse_headers(b"") == ("", {})
    assert parse_headers(_block({"Muster-Time": "2026-01-01T00:00:00+00:00", "X": " spaced "})) == (
        "", {"Muster-Time": "2026-01-01T00:00:00+00:00", "X": "spaced"})
    assert parse_headers(b"NATS/1.0 404 No Messages\r\n\r\n") == ("404", {"Description": "No Messages"})
    assert parse_headers(_block({"Nats-Last-Consumer": "7"}, "100 Idle Heartbeat")) == (
        "100", {"Description": "Idle Heartbeat", "Nats-Last-Consumer": "7"})
    assert parse_headers(b"NATS/1.0 503\r\n\r\n") == ("503", {})


def test_one_header_is_found_without_parsing_the_block() -> None:
    block = _block({"Muster-Type": "TasksRecorded", "Muster-Typed": "no", "Nats-Msg-Id": "m"})
    assert header(block, b"Muster-Type") == "TasksRecorded"
    assert header(block, b"Nats-Msg-Id") == "m"
    assert header(block, b"Muster-Time") is None and header(b"", b"Muster-Type") is None
    assert header(_block({"X-Muster-Type": "no"}), b"Muster-Type") is None  # a whole name, not a suffix
    assert header(_block({}, "100 Idle Heartbeat"), b"Muster-Type") is None


def test_an_ack_subject_gives_stream_and_consumer_sequence_and_pending() -> None:
    assert ack_sequences(b"$JS.ACK.EVENTS.c1.1.1042.17.1764000000000000000.5") == (1042, 17, 5)
    # the v2 form: a domain and an account hash after $JS.ACK, a random token at the end
    assert ack_sequences(b"$JS.ACK.hub.ACCHASH.EVENTS.c1.1.1042.17.1764000000000000000.5.xyz") == (1042, 17, 5)


def test_an_event_from_the_wire_is_the_one_a_message_gives() -> None:
    event = TaskQueued(job_id="j", task_id="t", attempt=2, node="n", action=Action.INSTALL, service="s")
    at = datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)
    for item in (
        Append(event, msg_id="m", aggregate_id="0b6f5c1e-8a4b-4c1e-9f3a-1234567890ab", version=7, time=at),
        Append(event, msg_id="m", time=at),  # no aggregate, no version: a task event
    ):
        headers = item.headers()
        data = event.model_dump_json().encode()
        expected = _decode("muster.evt.t.job.j", 42, data, headers)
        assert _from_wire(b"muster.evt.t.job.j", 42, data, _block(headers)) == expected
        # written in another order, or with more headers: the same
        shuffled = dict(reversed(list(headers.items()))) | {"Other": "x"}
        assert _from_wire(b"muster.evt.t.job.j", 42, data, _block(shuffled)) == expected
    assert expected.version is None and expected.time == at
