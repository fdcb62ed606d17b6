"""The nats-py internals `muster.bus.wire` relies on, pinned: an upgrade of nats-py that renames
or reshapes one fails here, in one place, instead of silently somewhere on the wire."""

from __future__ import annotations

import inspect

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.kv import KeyValue
from nats.protocol.command import hpub_cmd, pub_cmd

from muster.bus import protocol, wire
from muster.ports.delivery import ACK, PROGRESS, TERM, nak


def test_every_private_name_the_wire_uses_exists_with_the_shape_it_expects() -> None:
    nc = Client()
    sub = Subscription(nc, id=7, subject="x")
    js = JetStreamContext(nc, timeout=3.0)
    push = JetStreamContext.PushSubscription(js, sub, "S", "c")
    jsi = JetStreamContext._JSI(js=js, conn=nc, stream="S", ordered=True, psub=push, sub=sub, ccreq=ConsumerConfig())
    instances = {Client: nc, Subscription: sub, JetStreamContext: js, JetStreamContext.PushSubscription: push,
                 JetStreamContext._JSI: jsi, KeyValue.KeyWatcher: KeyValue.KeyWatcher(js)}
    for cls, names in wire.INTERNALS.items():
        for name in names:
            assert hasattr(instances[cls], name), f"nats-py's {cls.__name__} has no {name} any more"
    assert isinstance(nc._pending, list) and nc._pending_data_size == 0 and isinstance(nc._max_pending_size, int)
    assert nc._transport is None and isinstance(nc._server_info, dict)
    assert sub._id == 7 and js._nc is nc and js._timeout == 3.0
    assert push._sub is sub and sub._jsi is None and sub._wait_for_msgs_task is None
    assert jsi._hbtask is None and jsi._fctask is None
    # `close_push` / `stop_watch` end these tasks: nats-py's unsubscribe still only cancels them
    # (after its own unsubscribe, which raises on a closed connection), and a close not at all.
    unsubscribe = inspect.getsource(JetStreamContext.PushSubscription.unsubscribe)
    assert "self._sub._jsi._hbtask.cancel()" in unsubscribe and "self._sub._jsi._fctask.cancel()" in unsubscribe
    assert "await self._sub.unsubscribe()" in inspect.getsource(KeyValue.KeyWatcher.stop)
    # The read-loop hook replaces this method, and is called with these arguments by the parser.
    assert list(inspect.signature(Client._process_msg).parameters) == ["self", "sid", "subject", "reply", "data", "headers"]
    assert "self.nc._process_msg(sid, subject, reply, payload, hdr)" in inspect.getsource(
        __import__("nats.protocol.parser", fromlist=["Parser"]).Parser.parse)


def test_nats_py_flushes_the_buffer_the_publisher_writes_into() -> None:
    """Our frames go into `_pending` behind nats-py's own commands; nats-py must still take its
    commands from there and write them with `writelines` (else ours would be sent out of order)."""
    send = inspect.getsource(Client._send_command)
    flush = inspect.getsource(Client._flush_pending) + inspect.getsource(Client._flusher)
    assert "self._pending.append(cmd)" in send and "self._pending_data_size += len(cmd)" in send
    assert "self._transport.writelines(self._pending" in flush and "self._pending = []" in flush


def test_nats_py_still_takes_a_handshake_without_pong_for_done() -> None:
    """`wire.strict_handshake` fails a (re)connect whose PING got no PONG, and relies on nats-py
    setting CONNECTED on PONG only and starting its tasks after it: its handshake takes any
    other reply for done, and an -ERR its read loop then gets while CONNECTING closes the
    connection without callbacks (docs/testing.md, "A provisioner's connection closed for good,
    silently"). When this fails, nats-py changed them: see whether the workaround is still needed."""
    init = inspect.getsource(Client._process_connect_init)
    assert "if PONG_PROTO in next_op:\n            self._status = Client.CONNECTED" in init
    assert init.index("self._status = Client.CONNECTED") < init.index("self._reading_task = ")
    assert "self._ping_interval_task = " in init and "self._flusher_task = " in init
    err = inspect.getsource(Client._process_err)
    assert "if not self.is_connecting:\n            do_cbs = True" in err
    close = inspect.getsource(Client._close)  # (`wire.on_closed` is told at its start)
    assert close.index("self._status = Client.CLOSED") < close.index("await self._closed_cb()")


def test_frames_are_the_protocols_commands() -> None:
    assert protocol.frame("a.b", "", None, b"hi") == pub_cmd("a.b", "", b"hi") == b"PUB a.b  2\r\nhi\r\n"
    block = b"NATS/1.0\r\nNats-Msg-Id: k1\r\n\r\n"
    assert protocol.frame("a.b", "in.1", {"Nats-Msg-Id": "k1"}, b"{}") == hpub_cmd("a.b", "in.1", block, b"{}")


def test_a_settle_says_what_nats_py_messages_say() -> None:
    assert protocol.settle_body(ACK) == b""
    assert protocol.settle_body(TERM) == b"+TERM" and protocol.settle_body(PROGRESS) == b"+WPI"
    assert protocol.settle_body(nak()) == b"-NAK" and protocol.settle_body(nak(1.5)) == b'-NAK {"delay": 1500000000}'


def test_the_delivery_count_is_read_from_either_form_of_the_reply_subject() -> None:
    assert protocol.delivery_count(b"$JS.ACK.TASKS.c1.3.1042.17.1764000000000000000.5") == 3
    assert protocol.delivery_count(b"$JS.ACK.hub.ACCHASH.TASKS.c1.4.1042.17.1764000000000000000.5.xyz") == 4


def _private_names() -> set[str]:
    """Every private attribute and method of nats-py's client, subscription, message and
    JetStream classes (instance attributes read off fresh instances)."""
    from nats.aio.msg import Msg
    from nats.js.kv import KeyValue
    from nats.js.object_store import ObjectStore

    nc = Client()
    objects: list[object] = [nc, Subscription(nc, id=1, subject="x"), JetStreamContext(nc), Msg(nc), Client, Subscription,
                             JetStreamContext, Msg, KeyValue, ObjectStore]
    names = {n for o in objects for n in dir(o) if n.startswith("_") and not n.startswith("__")}
    return names | {n for o in objects[:4] for n in vars(o) if n.startswith("_") and not n.startswith("__")}


def test_no_module_but_the_wire_touches_nats_py_internals() -> None:
    """`obj._name` where `_name` is private to nats-py, on anything but `self`/`cls`, anywhere in
    muster/, services/ and contracts/ except `muster/bus/wire.py`."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    private = _private_names()
    assert {"_pending", "_transport", "_process_msg", "_subs", "_nc"} <= private
    candidate = re.compile(r"\.(" + "|".join(sorted(private)) + r")\b")
    found = []
    for top in ("muster", "services", "contracts"):
        for path in (root / top).rglob("*.py"):
            text = path.read_text()
            if path == root / "muster" / "bus" / "wire.py" or not candidate.search(text):
                continue
            for node in ast.walk(ast.parse(text)):
                if (isinstance(node, ast.Attribute) and node.attr in private
                        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "nats-py internals outside muster/bus/wire.py"
