"""How long one policy may evaluate (docs/governance.md, "A policy that runs too long"): its own
module, free of rego-cpp, for what only needs the setting (`muster up`, the compose generator)."""

POLICY_DEADLINE_S = 2.0
"""How long one policy may evaluate; small inputs take a tenth of a millisecond."""
POLICY_DEADLINE_ENV = "MUSTER_POLICY_DEADLINE"
"""The planner's deadline where it is started without `muster up` (compose.yaml sets it from `.env`)."""
