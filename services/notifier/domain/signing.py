"""Webhook signatures: HMAC-SHA256, timestamped, replay-protected (docs/governance.md).

Every webhook carries `Muster-Signature: t=<unix seconds>,v1=<hex>` where `<hex>` is
HMAC-SHA256(secret, "<t>.<body>"), and `Muster-Delivery: <notification id>`. A receiver checks
the signature with its copy of the secret, refuses a timestamp older than its tolerance (a
replayed request), and remembers the delivery ids it took within that window (a retried
delivery carries the same id: take it once). `verify` does exactly that.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import MutableSet

SIGNATURE = "Muster-Signature"
DELIVERY = "Muster-Delivery"
TOLERANCE_S = 300


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


class BadSignature(ValueError):
    pass


def verify(secret: bytes, body: bytes, header: str, delivery: str, now: float, seen: MutableSet[str],
           tolerance_s: float = TOLERANCE_S) -> None:
    """BadSignature unless `header` signs `body` with `secret`, recently, and `delivery` is new."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        raise BadSignature("no timestamp in the signature") from None
    if abs(now - timestamp) > tolerance_s:
        raise BadSignature(f"timestamp {timestamp} is outside the {tolerance_s:g} s tolerance: a replay?")
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    if not hmac.compare_digest(expected, parts.get("v1", "")):
        raise BadSignature("the signature does not match the body")
    if delivery in seen:
        raise BadSignature(f"delivery {delivery} was taken already: a replay")
    seen.add(delivery)
