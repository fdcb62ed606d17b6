"""A nats-server with authorization on and the auth service, for the auth tests: raw nats-py
connections (not muster's client) are what the server must keep apart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest_asyncio
from nats.aio.client import Client

from contracts import subjects
from muster.bus.connect import read_credentials_file
from muster.bus.server import NatsServer
from muster.bus.wire import close_unconnected
from services.auth.bootstrap import Bootstrap, BootstrapPrincipal
from services.auth.keys import AuthKeys, server_auth_config
from services.auth.service import AuthService


async def _quiet(*_: Any) -> None:
    return None


@dataclass
class Authed:
    server: NatsServer
    service: AuthService
    admin_token: str = field(repr=False)  # tokens never in test output
    system_token: str = field(repr=False)
    keys: AuthKeys
    folder: Path
    bootstrap: Bootstrap

    @property
    def url(self) -> str:
        return self.server.url

    async def raw(self, token: str | None, principal: str | None = None, client: type[Client] = Client, **options: Any) -> Client:
        """A plain nats-py connection, as a client in any language would make (an attacker's a
        `WatchedClient`: its refused requests end as the server says so)."""
        settings: dict[str, Any] = dict(servers=[self.url], allow_reconnect=False, max_reconnect_attempts=0,
                                        connect_timeout=3, error_cb=_quiet)
        if token is not None:
            settings["token"] = token
        if principal:
            settings["inbox_prefix"] = f"_INBOX.{principal}"
        settings.update(options)
        nc = client()
        try:
            await nc.connect(**settings)
        except BaseException:
            await close_unconnected(nc)  # (nats-py leaves a refused connect's socket open)
            raise
        return nc

    async def ask(self, nc: Client, me: str, verb: str, **body: Any) -> dict[str, Any]:
        reply = await nc.request(subjects.auth_request(me, verb), json.dumps(body).encode(), timeout=5)
        return json.loads(reply.data)

    async def people(self, people: dict[str, dict[str, Any]], grants: tuple[tuple[str, str, str], ...] = (),
                     tenant: str = "a") -> dict[str, str]:
        """Make each principal (by the super admin) and give the grants in `tenant`; their tokens."""
        root = await self.raw(self.admin_token, "root")
        tokens: dict[str, str] = {}
        try:
            for pid, fields in people.items():
                made = await self.ask(root, "root", "user-create", principal=pid, **fields)
                assert made["ok"], made
                tokens[pid] = made["data"]["token"]
            for pid, permission, scope in grants:
                assert (await self.ask(root, "root", "grant", principal=pid, permission=permission, tenant=tenant, scope=scope))["ok"]
        finally:
            await root.close()
        return tokens

    async def start_service(self) -> AuthService:
        self.service = await AuthService(self.url, self.keys, bootstrap=self.bootstrap).start()
        return self.service


@pytest_asyncio.fixture
async def authed(tmp_path: Path) -> AsyncIterator[Authed]:
    keys = AuthKeys.load_or_create(tmp_path / "keys")
    server = await NatsServer(tmp_path / "nats", name="authed", auth=server_auth_config(keys.issuer_public, keys.bus_secret)).start()
    spec = Bootstrap(tenants=("a", "b"), principals=(
        BootstrapPrincipal("root", "super_admin", tmp_path / "root.cred"),
        BootstrapPrincipal("sys", "service", tmp_path / "sys.cred", service="system"),
    ), by="test")
    service = await AuthService(server.url, keys, bootstrap=spec).start()
    fixture = Authed(server, service, read_credentials_file(tmp_path / "root.cred"),
                     read_credentials_file(tmp_path / "sys.cred"), keys, tmp_path, spec)
    try:
        yield fixture
    finally:
        await fixture.service.stop()
        await server.stop()
