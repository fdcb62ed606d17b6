"""Every service answers a request through `muster.bus.answers.answer_on_inbox` (an inbox or
nowhere): a `msg.respond(...)` of its own would answer on whatever reply subject the sender
named, another tenant's log or callbacks included (tests/integration/auth/test_reply_subjects.py)."""

from __future__ import annotations

import re
from pathlib import Path

from muster.bus.answers import answerable

ROOT = Path(__file__).parents[3]
ALLOWED = {
    "muster/bus/answers.py": "the one place that answers",
    "services/auth/service.py": "the auth callout answers nats-server's own request (account AUTH), never a client's",
}
RESPOND = re.compile(r"\.respond\(|publish\(\s*msg\.reply")


def test_no_service_answers_a_request_but_through_the_inbox_check() -> None:
    found = []
    for folder in ("muster", "services"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if RESPOND.search(line) and not (rel in ALLOWED and (rel != "services/auth/service.py" or "outcome.response" in line)):
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert found == [], found


def test_an_answer_goes_to_an_inbox_only() -> None:
    assert answerable("_INBOX.eve.abc.1") and answerable("_INBOX.x")
    for reply in (None, "", "$JS.API.STREAM.DELETE.EVENTS", "muster.evt.a.job.j1", "muster.cb.a.x", "_INBOX.*", "_INBOX.a.>",
                  "_INBOXES.a", "$KV.leases.shard.0", " _INBOX.a"):
        assert not answerable(reply), reply
