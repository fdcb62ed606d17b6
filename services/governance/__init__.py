"""The governance service: approval rules, policies, subscriptions and schedules (docs/governance.md)."""
