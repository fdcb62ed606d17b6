"""Linux network objects for nodes and test harnesses: a bridge with an address range, network
namespaces with a veth on it, long-lived processes inside, and a sweep of what a crashed run left.
Needs root (`root_refusal`). `rootfs` adds a node's own file system, hostname and sshd.

Every object is named `<prefix>-<suffix>` (a prefix is 1-6 lower-case letters or digits), so a
sweep of one prefix never touches another's objects (other provisioners, other test runs).
Interface names have at most 15 characters (the kernel's limit): hence the short prefixes.
Bridges and address leases are changed under one host-wide file lock, so that processes sharing
a bridge never hand out one address twice and never pick overlapping ranges.

This module is the interface; the code is in `base.py` (names, commands, the lock, long-lived
processes) and `network.py` (bridges, leases, namespaces, the sweep).
"""

from __future__ import annotations

from .base import (
    IFNAMSIZ,
    STATE_ROOT,
    Spawned,
    SystemCommandError,
    check_prefix,
    host_lock,
    kill_netns,
    kill_pids,
    netns_pids,
    object_name,
    reap,
    root_refusal,
    run,
    spawn_until,
)
from .network import (
    Bridge,
    NetNs,
    bridge_network,
    bridge_ports,
    claim_bridge,
    create_bridge,
    create_netns,
    delete_bridge_if_unused,
    delete_link,
    delete_netns,
    free_network,
    host_networks,
    lease_address,
    link_exists,
    link_is_up,
    raise_links,
    release_leases,
    set_link,
    sweep,
)

__all__ = [
    "IFNAMSIZ", "STATE_ROOT", "Bridge", "NetNs", "Spawned", "SystemCommandError", "bridge_network", "bridge_ports",
    "check_prefix", "claim_bridge", "create_bridge", "create_netns", "delete_bridge_if_unused", "delete_link",
    "delete_netns", "free_network", "host_lock", "host_networks", "kill_netns", "kill_pids", "lease_address",
    "link_exists", "link_is_up", "netns_pids", "object_name", "raise_links", "reap", "release_leases", "root_refusal", "run", "set_link",
    "spawn_until", "sweep",
]
