"""The authorization section of an authorizing nats-server's configuration (docs/security.md):
three accounts, the auth callout, and the auth service's own users that bypass the callout.
The secrets themselves are made and kept by the auth service (`services/auth/keys.py`)."""

from __future__ import annotations

AUTH_USER = "muster-auth"          # account AUTH: answers $SYS.REQ.USER.AUTH
LOG_USER = "muster-auth-log"       # account MUSTER: identity events and requests
SYS_USER = "muster-auth-sys"       # account SYS: finds and closes revoked connections
ISSUER_ENV, SECRET_ENV = "MUSTER_AUTH_ISSUER", "MUSTER_BUS_SECRET"


def server_auth_config(issuer_public: str, bus_secret: str, from_env: bool = False) -> str:
    """The accounts and the auth callout of an authorizing nats-server. `from_env`: the server
    reads both from its environment (`$MUSTER_AUTH_ISSUER`, `$MUSTER_BUS_SECRET`: compose.yaml),
    and the config file holds no secret."""
    if from_env:
        issuer_public, secret = f"${ISSUER_ENV}", f"${SECRET_ENV}"
    else:
        secret = f'"{bus_secret}"'
    return "\n".join([
        "accounts {",
        f'  AUTH {{ users: [ {{ user: "{AUTH_USER}", password: {secret} }} ] }}',
        f'  MUSTER {{ jetstream: enabled, users: [ {{ user: "{LOG_USER}", password: {secret} }} ] }}',
        f'  SYS {{ users: [ {{ user: "{SYS_USER}", password: {secret} }} ] }}',
        "}",
        "system_account: SYS",
        "authorization {",
        "  auth_callout {",
        f"    issuer: {issuer_public}",
        "    account: AUTH",
        f'    auth_users: [ "{AUTH_USER}", "{LOG_USER}", "{SYS_USER}" ]',
        "  }",
        "}",
    ])
