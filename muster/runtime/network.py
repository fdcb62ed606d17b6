"""Where `muster up` and `muster demo` listen, and with what TLS (docs/runtime.md, "TLS")."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from muster.tls.context import INSECURE_ENV

from .tls import DeploymentTls


@dataclass(frozen=True)
class Network:
    tls: bool
    mutual: bool
    host: str
    names: tuple[str, ...]
    insecure_network: bool

    def deployment(self, data_dir: Path) -> dict[str, Any]:
        """The `Deployment` arguments."""
        tls = DeploymentTls(data_dir / "tls", host=self.host, mutual=self.mutual, names=self.names) if self.tls or self.mutual else None
        return {"tls": tls, "host": self.host, "insecure_network": self.insecure_network}


def _host_names(ctx: click.Context, param: click.Parameter, names: tuple[str, ...]) -> tuple[str, ...]:
    from muster.tls.ca import host_problem  # cryptography only when a name is given

    for name in names:
        if (problem := host_problem(name)) is not None:
            raise click.BadParameter(problem)
    return names


def network_options(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapper(*args: Any, tls: bool, mtls: bool, host: str, tls_names: tuple[str, ...], insecure_network: bool, **kwargs: Any) -> Any:
        return f(*args, network=Network(tls, mtls, host, tls_names, insecure_network), **kwargs)

    options = [
        click.option("--tls", is_flag=True, help="TLS on every hop: a local CA in <data-dir>/tls signs nats-server's and the "
                                                 "tracker's certificates; clients verify them (tls://, https://)"),
        click.option("--mtls", is_flag=True, help="mutual TLS on the bus (implies --tls): every client presents a certificate of the CA"),
        click.option("--host", default="127.0.0.1", show_default=True,
                     help="where nats-server and the tracker listen; another address than loopback needs --tls"),
        click.option("--tls-name", "tls_names", multiple=True, callback=_host_names,
                     help="one more DNS name or IP address the server certificates carry"),
        click.option("--insecure-network", is_flag=True, envvar=INSECURE_ENV,
                     help="allow plain TCP on another address than loopback (tokens then cross the network in clear)"),
    ]
    g: Any = wrapper
    for option in reversed(options):
        g = option(g)
    return g
