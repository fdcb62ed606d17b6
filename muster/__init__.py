"""muster: an event-sourced cluster manager on NATS JetStream."""

from muster import _startup

__version__ = "0.1.0"

_startup.install()
