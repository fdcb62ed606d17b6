"""A notifier started without a secrets file says so when a subscription names a secret. Walk of
session 24: `muster up` (no $MUSTER_NOTIFIER_SECRETS) and a tenant admin's `muster notify add ops
... --secret secret://ops-hook` was told `secret 'ops-hook' is not in the notifier's secrets
file`, of a file there was none of; neither the tenant admin nor the operator it asked learned
that the notifier needs one given, nor how `muster up` gives it."""

from __future__ import annotations

from services.notifier.domain.secrets import NotifierSecrets
from services.notifier.entrypoint import named_secrets


def test_no_file_given_is_said_with_how_to_give_one() -> None:
    value, why = named_secrets(None).value("acme", "secret://ops-hook")
    assert value == ""
    assert why == ("secret 'ops-hook': the notifier was started without a secrets file (its operator gives it one: "
                   "`muster notifier --secrets FILE`, or $MUSTER_NOTIFIER_SECRETS, which `muster up` passes on; "
                   "docs/governance.md, \"Whose secrets\")"), why


def test_a_file_without_the_name_is_said_as_before() -> None:
    secrets = NotifierSecrets.of({"@tenants": {"beta": {"@secrets": {"ops-hook": "x"}}}}, "secrets file s.json")
    value, why = secrets.value("acme", "secret://ops-hook")
    assert value == "" and why == "secret 'ops-hook' is not in the notifier's secrets file (under '@secrets', or '@tenants' → 'acme')"
    assert secrets.value("beta", "secret://ops-hook") == ("x", "")
