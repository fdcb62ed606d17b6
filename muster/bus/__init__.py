"""Adapters to NATS JetStream shared by every service: the embedded server, connections,
stream setup and the event store."""
