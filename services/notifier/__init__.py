"""The notifier: tells subscribers of jobs, approvals, leases and drift (docs/governance.md)."""
