"""Ports: what the services need from the outside world, as protocols with no NATS in them.

- `eventlog`: the append-only log (append with expected-sequence fencing and idempotency keys,
  read, replay) and the types that travel through it (`Recorded`, `Append`).
- `taskqueue`: where task attempts go for provisioners to take.
- `clock`: the time and deferred calls, so timeouts can be tested without waiting.
- `budgets`: values changed only by compare-and-set, shared by every planner (the concurrency
  limits' budgets).

`muster.bus` holds the NATS JetStream adapters; `muster.ports.memory` holds in-memory fakes
that keep the same guarantees, for unit tests of the service layers.
"""
