"""A nats-server with TLS (the local CA's certificates) and the environment of a client that
trusts nothing but what each test names."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from muster.bus.server import start_blocking
from muster.tls.ca import LocalCA
from muster.tls.context import CA_ENV, CERT_ENV, INSECURE_ENV, KEY_ENV
from muster.tls.natsconf import ServerTls

StartTls = Callable[..., str]


@pytest.fixture(autouse=True)
def _trust_nothing_yet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (CA_ENV, CERT_ENV, KEY_ENV, INSECURE_ENV, "MUSTER_DATA_DIR", "NATS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./.muster/tls of the working tree


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return LocalCA.load_or_create(tmp_path / "tls")


@pytest.fixture
def tls_server(tmp_path: Path, ca: LocalCA) -> Iterator[StartTls]:
    """Starts a nats-server (no authorization) with a certificate of `ca` for `hosts`."""
    started: list[subprocess.Popen[bytes]] = []

    def start(hosts: tuple[str, ...] = ("127.0.0.1",), verify_clients: bool = False, name: str = "nats") -> str:
        pair = ca.issue(tmp_path / "tls" / "servers" / name, f"muster {name}", hosts)
        tls = ServerTls(str(pair.cert), str(pair.key), str(ca.cert_path), verify_clients=verify_clients)
        proc, url = start_blocking(tmp_path / name, name=name, tls=tls)
        started.append(proc)
        return url

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
