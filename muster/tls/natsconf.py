"""The `tls` blocks of a nats-server config: the client port and the cluster routes.

- Clients shake hands in TLS before the server says anything (`handshake_first`): nothing, not
  even the server's INFO, crosses in clear, and a client can never be talked down to plain TCP.
  Other NATS clients need their TLS-first option (`nats --tlsfirst`, nats.go `TLSHandshakeFirst`).
- Routes always verify both ends: each node presents its certificate, signed by the same CA, and
  checks the other's against the route's host name.
- With mutual TLS for clients (`verify_clients`), a client without a certificate of the CA is
  refused before its token is read; the token still says who it is.

nats-server reads the files again on a config reload (SIGHUP): that is how certificates rotate.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerTls:
    """A server's certificate, its key, and the CA its peers (and clients, with mTLS) must have."""

    cert: str
    key: str
    ca: str
    verify_clients: bool = False


def _files(tls: ServerTls, indent: str) -> list[str]:
    return [f'{indent}  cert_file: "{tls.cert}"', f'{indent}  key_file: "{tls.key}"', f'{indent}  ca_file: "{tls.ca}"']


def client_block(tls: ServerTls) -> str:
    lines = ["tls {", *_files(tls, ""), "  handshake_first: true", "  timeout: 5"]
    if tls.verify_clients:
        lines.append("  verify: true")
    return "\n".join([*lines, "}"])


def route_block(tls: ServerTls, indent: str = "  ") -> str:
    return "\n".join([f"{indent}tls {{", *_files(tls, indent), f"{indent}  verify: true", f"{indent}  timeout: 5", f"{indent}}}"])
