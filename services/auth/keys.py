"""The secrets an authorizing nats-server and its auth service share, made on first start and
kept in files only their owner can read (`<data-dir>/auth/`), or given by the environment
(compose: `MUSTER_AUTH_ISSUER_SEED`, `MUSTER_BUS_SECRET`).

- the issuer seed: the account nkey that signs the callout's answers; the server knows its
  public key;
- the bus secret: the password of the auth service's own three users (accounts AUTH, MUSTER,
  SYS), which bypass the callout.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from muster.bus.serverauth import AUTH_USER, ISSUER_ENV, LOG_USER, SECRET_ENV, SYS_USER, server_auth_config

from .natsjwt import Signer, new_account_seed

__all__ = ["AUTH_USER", "LOG_USER", "SYS_USER", "AuthKeys", "env_lines", "server_auth_config"]


def _private_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")


@dataclass(frozen=True)
class AuthKeys:
    issuer_seed: str
    bus_secret: str

    @property
    def issuer_public(self) -> str:
        return Signer(self.issuer_seed).public_key

    @classmethod
    def load_or_create(cls, folder: Path) -> AuthKeys:
        seed_file, secret_file = folder / "issuer.seed", folder / "bus.secret"
        if not seed_file.exists():
            _private_file(seed_file, new_account_seed())
        if not secret_file.exists():
            _private_file(secret_file, secrets.token_hex(24))
        return cls(seed_file.read_text().strip(), secret_file.read_text().strip())

    @classmethod
    def from_env(cls) -> AuthKeys | None:
        seed, secret = os.environ.get("MUSTER_AUTH_ISSUER_SEED"), os.environ.get("MUSTER_BUS_SECRET")
        return cls(seed, secret) if seed and secret else None


def env_lines(keys: AuthKeys) -> str:
    """A compose `.env`: the auth service's seed and password, the servers' issuer key."""
    return f"MUSTER_AUTH_ISSUER_SEED={keys.issuer_seed}\n{ISSUER_ENV}={keys.issuer_public}\n{SECRET_ENV}={keys.bus_secret}\n"
