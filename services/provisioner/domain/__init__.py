"""The provisioner worker's pure core (`core.WorkerCore`): slots, claiming ahead, the waiting line,
keep-alives and drain as a state machine. No IO, no asyncio, no logging; deterministic."""
