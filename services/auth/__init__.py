"""The auth service: principals, tokens, grants and permission checks (domain/, pure), the NATS
auth-callout responder and the identity admin requests (adapters), identity backends."""
