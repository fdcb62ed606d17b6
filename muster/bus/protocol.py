"""The NATS protocol as muster reads and writes it, without a connection: header blocks, JetStream
reply subjects, and the frames `muster.bus.wire` puts on the wire (pure functions)."""

from __future__ import annotations

import json

from nats.protocol.command import hpub_cmd, pub_cmd

from ..ports.delivery import Settle, Verdict


def parse_headers(block: bytes) -> tuple[str, dict[str, str]]:
    """(status, headers) of a NATS header block: `NATS/1.0[ <status>[ <description>]]` and
    `Name: value` lines. A status line's description goes in as `Description`."""
    if not block:
        return "", {}
    lines = block.decode("utf-8", "replace").split("\r\n")
    headers: dict[str, str] = {}
    status = ""
    first = lines[0]
    if len(first) > 9:  # "NATS/1.0 404 No Messages"
        status, _, description = first[9:].partition(" ")
        if description:
            headers["Description"] = description
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip()] = value.strip()
    return status, headers


def header(block: bytes, name: bytes) -> str | None:
    """The value of one header of a block, found without parsing the others (None if absent)."""
    at = block.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    start = at + len(name) + 3
    end = block.find(b"\r\n", start)
    return block[start : end if end >= 0 else len(block)].decode("utf-8", "replace").strip()


def ack_sequences(reply: bytes) -> tuple[int, int, int]:
    """(stream sequence, consumer sequence, pending) from a JetStream delivery's reply subject,
    `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<time>.<pending>` (or the v2 form
    with a domain and an account hash after `$JS.ACK`)."""
    tokens = reply.split(b".")
    at = 5 if len(tokens) == 9 else 7
    return int(tokens[at]), int(tokens[at + 1]), int(tokens[at + 3])


def delivery_count(reply: bytes) -> int:
    """How many times a JetStream delivery has been delivered, from its reply subject."""
    tokens = reply.split(b".")
    return int(tokens[4] if len(tokens) == 9 else tokens[6])


def frame(subject: str, reply: str, headers: dict[str, str] | None, data: bytes) -> bytes:
    """The PUB / HPUB command of one message. Our header names and values are plain tokens
    (event types, idempotency keys, times, batch ids): nats-py's per-header checks are not
    repeated."""
    if not headers:
        return pub_cmd(subject, reply, data)
    header = bytearray(b"NATS/1.0\r\n")
    for name, value in headers.items():
        header += f"{name}: {value}\r\n".encode()
    header += b"\r\n"
    return hpub_cmd(subject, reply, bytes(header), data)


_VERDICTS = {Verdict.ACK: b"", Verdict.NAK: b"-NAK", Verdict.TERM: b"+TERM", Verdict.PROGRESS: b"+WPI"}


def settle_body(settle: Settle) -> bytes:
    """The payload that tells JetStream what became of a delivery (as nats-py's `Msg` sends it)."""
    body = _VERDICTS[settle.verdict]
    if settle.verdict is Verdict.NAK and settle.delay > 0:
        body += b" " + json.dumps({"delay": int(settle.delay * 1e9)}).encode()
    return body
