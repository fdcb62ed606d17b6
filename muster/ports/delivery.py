"""What a consumer answers the bus about a delivery it took (at-least-once delivery).

- `ACK`: done; it is not delivered again.
- `NAK` (with a delay): not done; deliver it again after the delay (to this consumer or another).
- `TERM`: never deliver it again (undecodable, or poison).
- `PROGRESS`: still working on it; do not redeliver it yet (a keep-alive, any number of times).

Every consumer (the log's durable consumers, `muster.bus.consume`; the provisioner's task pulls)
decides one of these and hands it to `muster.bus.wire.settle`, the one place that sends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    ACK = "ack"
    NAK = "nak"
    TERM = "term"
    PROGRESS = "progress"


@dataclass(frozen=True, slots=True)
class Settle:
    verdict: Verdict
    delay: float = 0.0
    """Seconds before a NAK's redelivery (0: at once)."""


ACK = Settle(Verdict.ACK)
TERM = Settle(Verdict.TERM)
PROGRESS = Settle(Verdict.PROGRESS)


def nak(delay: float = 0.0) -> Settle:
    return Settle(Verdict.NAK, delay)
