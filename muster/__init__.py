"""muster: an event-sourced cluster manager on NATS JetStream."""

__version__ = "0.1.0"
