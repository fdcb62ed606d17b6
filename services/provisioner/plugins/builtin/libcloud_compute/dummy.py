"""libcloud's offline `dummy` driver as the libcloud provider runs it: a machine gets the name it
was asked for, and an id no other machine of the driver had.

libcloud's `DummyNodeDriver.create_node` names every machine `dummy-<n>`, whatever it is asked,
and numbers it one more than the machines it holds: once one is destroyed, the next takes the
id of one still running. The provider finds machines by id (a delete of the one destroyed both)
and, for a create whose answer was lost, by name (it found none). This subclass keeps the rest of
the driver (its sizes, images, in-memory list) as libcloud has it."""

from __future__ import annotations

import itertools
from typing import Any

from libcloud.compute.base import Node, NodeImage, NodeSize
from libcloud.compute.drivers.dummy import DummyNodeDriver, _int_to_ip, _ip_to_int


class NamedDummyNodeDriver(DummyNodeDriver):
    # An offline driver needs no credentials (libcloud's takes one it never checks): a provider on
    # it wanted a secrets file entry, and `muster up` started again with it, to make a first machine.
    def __init__(self, creds: Any = "") -> None:
        super().__init__(creds)
        # itertools.count: next() is atomic, and the provider's calls run in threads.
        self._ids = itertools.count(max((int(n.id) for n in self.nl), default=0) + 1)

    # Libcloud's dummy takes these three only (no location, no auth), and so does this one: a
    # create_args it does not take is refused, as a real driver's would be.
    def create_node(self, name: str, size: NodeSize, image: NodeImage) -> Node:  # type: ignore[override]
        node = super().create_node(name, size, image)
        node.id = next(self._ids)
        node.name = name
        node.public_ips = [_int_to_ip(_ip_to_int("127.0.0.0") + node.id)]
        return node
