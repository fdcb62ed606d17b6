"""The libcloud provider through the plugin registry: libcloud's offline `dummy` driver, and the
real `ec2` driver against a local AWS endpoint (moto's server, a process of this module's: one,
emptied before each test that uses it, for the tests of the endpoint as AWS writes it; one of
their own for those of another endpoint, moto's own or one checking credentials)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from cloud_support import UBUNTU_AMI, CuttingProxy, fresh_cloud, moto_ec2

from contracts.tasks import TaskMessage
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.libcloud_compute.errors import passing, translate
from services.provisioner.plugins.builtin.libcloud_compute.provider import LibcloudProvider, _gone, host_keys_from_console
from services.provisioner.plugins.testing import make_task, next_task

DUMMY_KEY = "dummy-credential-7f3a"

# One loop for the module's async tests: the shared endpoint's process (and the task reading its
# output) lives in it, as long as the module's tests.
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_ec2() -> AsyncIterator[dict[str, object]]:
    async with moto_ec2() as endpoint:
        yield endpoint


@pytest_asyncio.fixture(loop_scope="module")
async def ec2(shared_ec2: dict[str, object]) -> dict[str, object]:
    """The local AWS endpoint, holding nothing (the tests count machines by name)."""
    await fresh_cloud(shared_ec2)
    return shared_ec2


@pytest_asyncio.fixture(loop_scope="module")
async def cloud_registry(tmp_path: Path) -> AsyncIterator[PluginRegistry]:
    secrets = {"dummy": {"key": DUMMY_KEY}, "aws": {"key": "testing", "secret": "testing"}}
    reg = PluginRegistry.discover(secrets=secrets, work_dir=tmp_path / "work")
    yield reg
    await reg.aclose()


def cloud_task(action: str, provider: str, fields: dict[str, Any], *, flavor: str, image: str, node: str = "n1", **kw: Any) -> TaskMessage:
    # 120 s, not make_task's 30: moto's first answers load its data (seconds of CPU), and at load
    # 17 a create's "list sizes" got no answer within 30 s. No test here waits the deadline out.
    kw.setdefault("timeout_s", 120)
    task = make_task(action, providertype="libcloud", provider_name=provider, provider_fields=fields, node_id=node,
                     automators=["simulated"], **kw)
    return task.model_copy(update={"node": task.node.model_copy(update={"flavor": flavor, "image": image, "sshuser": "ubuntu"})})


@MODULE_LOOP
async def test_dummy_create_confirm_delete(cloud_registry: PluginRegistry) -> None:
    fields = {"driver": "dummy"}
    create = cloud_task("create", "dummy", fields, flavor="1", image="Ubuntu 9.10")
    created = await cloud_registry.execute(create)
    assert created.ok, created.error
    machine = created.result["providerid"]
    assert created.result["ssh-auth"] == {"user": "ubuntu"} and created.ipaddresses["access_v4"].startswith("127.0.0.")
    assert DUMMY_KEY not in json.dumps(created.model_dump())
    confirm = next_task(create, created, "confirm")
    confirmed = await cloud_registry.execute(confirm)
    assert confirmed.ok, confirmed.error
    assert "ssh_host_keys" not in confirmed.result and "published no host key" in confirmed.stdout

    provider = cloud_registry.provider("libcloud")
    assert isinstance(provider, LibcloudProvider)
    [driver] = provider._drivers.values()  # one driver per configuration: the dummy keeps its nodes in it
    assert {str(n.id): n.name for n in driver.list_nodes()}[machine] == created.result["cloud_name"] == "muster-c1-n1"
    deleted = await cloud_registry.execute(next_task(confirm, confirmed, "delete"))
    assert deleted.ok and deleted.stdout == f"destroyed {machine}"
    assert machine not in {str(n.id) for n in driver.list_nodes()}
    twice = await cloud_registry.execute(next_task(confirm, confirmed, "delete"))
    assert twice.ok and "did not exist any more" in twice.stdout


@MODULE_LOOP
async def test_the_offline_dummy_needs_no_credentials(cloud_registry: PluginRegistry) -> None:
    """docs/plugins.md's first try of the provider (`{"driver": "dummy"}`, no secrets entry) failed:
    `libcloud driver 'dummy' needs 'key' ...: put them in the provisioners' secrets file`."""
    create = cloud_task("create", "offline", {"driver": "dummy"}, flavor="1", image="1")
    created = await cloud_registry.execute(create)
    assert created.ok, created.error
    deleted = await cloud_registry.execute(next_task(create, created, "delete"))
    assert deleted.ok, deleted.error


@MODULE_LOOP
async def test_dummy_machines_have_their_names_and_ids_of_their_own(cloud_registry: PluginRegistry) -> None:
    """libcloud's dummy named every machine dummy-<n> and numbered it one more than it held: a
    machine made after a delete took the id of one still running, and deleting either destroyed
    both. The rollback of a create that lost its answer finds the machine by its name."""
    def task(action: str, node: str, **kw: Any) -> TaskMessage:
        return cloud_task(action, "dummy", {"driver": "dummy"}, flavor="1", image="1", node=node, **kw)

    made = {n: await cloud_registry.execute(task("create", n)) for n in ("n1", "n2")}
    assert all(o.ok for o in made.values())
    gone = await cloud_registry.execute(task("delete", "n1", results=made["n1"].result))
    assert gone.ok, gone.error
    made["n3"] = await cloud_registry.execute(task("create", "n3"))
    ids = {n: o.result["providerid"] for n, o in made.items()}
    assert len(set(ids.values())) == 3, ids
    assert made["n3"].ipaddresses["access_v4"] != made["n2"].ipaddresses["access_v4"]
    gone = await cloud_registry.execute(task("delete", "n3", results=made["n3"].result))
    assert gone.ok and gone.stdout == f"destroyed {ids['n3']}", gone.stdout
    provider = cloud_registry.provider("libcloud")
    assert isinstance(provider, LibcloudProvider)
    [driver] = provider._drivers.values()
    assert {n.name: str(n.id) for n in driver.list_nodes()}["muster-c1-n2"] == ids["n2"]  # n2's machine is still there
    rollback = await cloud_registry.execute(task("delete", "n2"))  # no providerid: found by its name
    assert rollback.ok and rollback.stdout == f"destroyed {ids['n2']} (muster-c1-n2), which a failed create had made"
    assert not [n for n in driver.list_nodes() if n.name.startswith("muster-")]


@MODULE_LOOP
async def test_bad_input_is_named(cloud_registry: PluginRegistry) -> None:
    """Each is permanent: the same request fails the same way, so the planner does not retry it."""
    unknown = await cloud_registry.execute(cloud_task("create", "dummy", {"driver": "nosuchcloud"}, flavor="1", image="1"))
    assert not unknown.ok and unknown.error.startswith("create: unknown libcloud driver 'nosuchcloud'") and unknown.permanent
    size = await cloud_registry.execute(cloud_task("create", "dummy", {"driver": "dummy"}, flavor="huge", image="1"))
    assert not size.ok and "the cloud has no size 'huge' (hardware type 'small'; sizes: 1, 2, 3, 4)" in size.error
    image = await cloud_registry.execute(cloud_task("create", "dummy", {"driver": "dummy"}, flavor="1", image="plan9"))
    assert not image.ok and "the cloud has no image 'plan9' (image type 'ubuntu22')" in image.error
    args = await cloud_registry.execute(cloud_task("create", "dummy", {"driver": "dummy", "create_args": {"ex_nope": 1}}, flavor="1", image="1"))
    assert not args.ok and "create node: TypeError" in args.error
    garbled = await cloud_registry.execute(cloud_task("create", "dummy", {"driver": "dummy", "create_args": "{nope"}, flavor="1", image="1"))
    assert not garbled.ok and garbled.error.startswith("provider 'dummy' (libcloud): field 'create_args' (Create arguments): expected JSON")
    assert all(o.permanent and not o.may_have_made for o in (size, image, args, garbled))
    # No credentials in the secrets file: named as such, not as a field the driver does not take.
    nokey = await cloud_registry.execute(cloud_task("create", "nokeys", {"driver": "ec2", "region": "us-east-1"},
                                                    flavor="t2.micro", image="ami-1"))
    assert not nokey.ok and ("libcloud driver 'ec2' needs 'key', which provider 'nokeys' was not given: put them in "
                             "the provisioners' secrets file") in nokey.error, nokey.error
    alone = await cloud_registry.execute(cloud_task("create", "nokeys", {"driver": "ec2", "secret": "only-the-secret-9"},
                                                    flavor="t2.micro", image="ami-1"))
    assert not alone.ok and "needs 'key'" in alone.error and "only-the-secret-9" not in alone.model_dump_json()
    assert nokey.permanent and alone.permanent


@MODULE_LOOP
async def test_an_endpoint_that_does_not_answer_is_named(cloud_registry: PluginRegistry, closed_port: int) -> None:
    port = closed_port
    fields = {"driver": "ec2", "region": "us-east-1", "driver_args": {"host": "127.0.0.1", "port": port, "secure": False}}
    down = await cloud_registry.execute(cloud_task("create", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI))
    assert not down.ok and down.error == f"create: list nodes: cannot reach the cloud at 127.0.0.1:{port}: Connection refused"
    assert not down.may_have_made  # it never asked for a machine
    assert not down.permanent  # the endpoint may answer on a retry
    gone = await cloud_registry.execute(cloud_task("delete", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI,
                                                  results={"providerid": "i-0123456789abcdef0"}))
    assert not gone.ok and gone.error == f"delete: list nodes: cannot reach the cloud at 127.0.0.1:{port}: Connection refused"


@MODULE_LOOP
async def test_credentials_go_where_the_driver_takes_them(cloud_registry: PluginRegistry, closed_port: int) -> None:
    """azure_arm takes (tenant_id, subscription_id, key, secret): with the first two in
    driver_args, as docs/plugins.md shows, the credentials are its key and secret, not given
    twice. (Its login goes to a loopback address here, where nothing answers.)"""
    login = f"https://127.0.0.1:{closed_port}/"
    environment = {"resourceManagerEndpointUrl": login, "activeDirectoryEndpointUrl": login,
                   "activeDirectoryResourceId": login, "storageEndpointSuffix": "core.windows.net"}
    fields = {"driver": "azure_arm", "region": "westeurope",
              "driver_args": {"tenant_id": "00000000-0000-0000-0000-000000000000",
                              "subscription_id": "11111111-1111-1111-1111-111111111111", "cloud_environment": environment}}
    reg = PluginRegistry.discover(secrets={"azure": {"key": "client-id", "secret": "client-secret-4d2"}})
    try:
        out = await reg.execute(cloud_task("create", "azure", fields, flavor="Standard_B1s", image="ubuntu"))
    finally:
        await reg.aclose()
    assert not out.ok and out.error.startswith("create: start libcloud driver 'azure_arm': cannot reach the cloud"), out.error


@pytest.mark.timeout(120)
@MODULE_LOOP
async def test_refused_credentials_are_named() -> None:
    secret = "wrong-secret-8c1e"
    reg = PluginRegistry.discover(secrets={"aws": {"key": "AKIAWRONGWRONGWRONG1", "secret": secret}})
    try:
        async with moto_ec2(auth=True) as endpoint:
            fields = {"driver": "ec2", "region": "us-east-1", "driver_args": endpoint}
            out = await reg.execute(cloud_task("create", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI))
            gone = await reg.execute(cloud_task("delete", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI,
                                                results={"providerid": "i-0123456789abcdef0"}))
    finally:
        await reg.aclose()
    assert not out.ok and out.error == (
        "create: the cloud refused the credentials of provider 'aws' (list nodes: AuthFailure: AWS was not able to "
        "validate the provided access credentials): check its entry in the provisioners' secrets file (docs/secrets.md)")
    assert secret not in out.model_dump_json()
    assert out.permanent and not out.may_have_made  # no retry can do better (the masking of secrets keeps the flag)
    assert not gone.ok and gone.permanent and "refused the credentials" in gone.error


@pytest.mark.timeout(120)
@MODULE_LOOP
async def test_an_endpoint_the_driver_reads_nothing_from_is_said_to_be_that(cloud_registry: PluginRegistry) -> None:
    """moto's own server (its XML namespaces are not AWS's): the ec2 driver finds no image in its
    answers, and a user trying EC2 offline was told `the cloud has no image 'ami-785db401'`, one
    of moto's own, as if mistyped. The same image on the patched server is found."""
    async with moto_ec2(as_aws=False) as endpoint:
        fields = {"driver": "ec2", "region": "us-east-1", "driver_args": endpoint}
        out = await cloud_registry.execute(cloud_task("create", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI))
    assert not out.ok and out.permanent, out
    assert out.error == (f"create: the cloud has no image {UBUNTU_AMI!r} (image type 'ubuntu22'); it lists no image at all: is "
                         "the endpoint one the driver reads? (a local EC2: docs/plugins.md, \"Trying EC2 offline\")"), out.error


@contextlib.asynccontextmanager
async def answering(status: int, body: str) -> AsyncIterator[int]:
    """A local endpoint that answers every request with `body` (a proxy's HTML error page): its port."""
    async def page(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@MODULE_LOOP
async def test_an_answer_the_driver_cannot_read_is_said_with_its_start_and_no_secret() -> None:
    """A gateway's HTML page where EC2's XML was expected: the error read `MalformedResponseError:
    <MalformedResponseException in <libcloud.compute.drivers.ec2.EC2NodeDriver object at 0x7f...>
    'Failed to parse XML'>: '<html>...'`, a Python object's address in a user's message."""
    secret = "gateway-secret-5b9d"
    reg = PluginRegistry.discover(secrets={"aws": {"key": "AKIAGATEWAYGATEWAY12", "secret": secret}})
    try:
        async with answering(502, f"<html><body>Bad gateway<br>Signature=sig-7d1f {secret}</body>") as port:
            fields = {"driver": "ec2", "region": "us-east-1", "driver_args": {"host": "127.0.0.1", "port": port, "secure": False}}
            out = await reg.execute(cloud_task("create", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI))
    finally:
        await reg.aclose()
    assert not out.ok and not out.may_have_made and not out.permanent, out  # (a gateway's page may pass)
    assert out.error.startswith("create: list nodes: MalformedResponseError: the cloud's answer is not what libcloud's "
                                "Amazon EC2 driver reads (Failed to parse XML); it began: '<html><body>Bad gateway<br>"), out.error
    assert " object at 0x" not in out.error and "<MalformedResponseException" not in out.error
    assert secret not in out.model_dump_json() and "sig-7d1f" not in out.error  # (masked: the secret, a signature)


@pytest.mark.timeout(120)
@MODULE_LOOP
async def test_the_endpoint_going_down_mid_create_leaves_no_machine_behind(cloud_registry: PluginRegistry,
                                                                           ec2: dict[str, object]) -> None:
    """The cloud makes the machine, the endpoint goes away before the answer: create fails
    saying the machine may exist, and the rollback's delete (no providerid) destroys it by name
    once the endpoint is back."""
    endpoint = ec2
    proxy = CuttingProxy(int(str(endpoint["port"])))
    await proxy.start()
    try:
        fields = {"driver": "ec2", "region": "us-east-1", "driver_args": {**endpoint, "port": proxy.port}}
        proxy.cut_after = b"Action=RunInstances"
        create = cloud_task("create", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI)
        lost = await cloud_registry.execute(create)
        assert proxy.cut.is_set() and not lost.ok and lost.may_have_made  # (kept through the masking of the secrets)
        assert lost.error.startswith(f"create: create node: cannot reach the cloud at 127.0.0.1:{proxy.port}: "), lost.error
        assert lost.error.endswith("; the machine may have been made: the next attempt, or the job's rollback, "
                                   "destroys it by its name, muster-c1-n1"), lost.error
        provider = cloud_registry.provider("libcloud")
        assert isinstance(provider, LibcloudProvider)
        [driver] = provider._drivers.values()
        rollback = cloud_task("delete", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI)  # no providerid
        down = await cloud_registry.execute(rollback)
        assert not down.ok and down.error == f"delete: list nodes: cannot reach the cloud at 127.0.0.1:{proxy.port}: Connection refused"
        again = await cloud_registry.execute(create)  # fails before asking for a machine: it made none
        assert not again.ok and not again.may_have_made and "may have been made" not in again.error

        await proxy.start()  # the endpoint is back (libcloud blocks: its calls leave the loop to the proxy)
        [made] = [n for n in await asyncio.to_thread(driver.list_nodes) if n.name == "muster-c1-n1"]
        assert str(made.state) == "running"
        deleted = await cloud_registry.execute(rollback)
        assert deleted.ok and deleted.stdout == f"destroyed {made.id} (muster-c1-n1), which a failed create had made"
        assert [str(n.state) for n in await asyncio.to_thread(driver.list_nodes) if n.name == "muster-c1-n1"] == ["terminated"]
    finally:
        await proxy.stop()


def test_only_a_terminated_machine_counts_as_gone() -> None:
    # A delete by name skips what the cloud lists after destroying it; a stopped leftover of a
    # failed create still has its disks, so it is destroyed too (it was skipped).
    class Node:
        def __init__(self, state: str) -> None:
            self.state = state

    assert _gone(Node("terminated")) and not any(_gone(Node(s)) for s in ("stopped", "stopping", "running", "unknown"))


def test_host_keys_come_from_cloud_inits_console_block() -> None:
    console = ("boot...\n-----BEGIN SSH HOST KEY KEYS-----\necdsa-sha2-nistp256 AAAAE2Vj root@ip-10-0-0-1\n"
               "ssh-ed25519 AAAAC3Nz root@ip-10-0-0-1\n-----END SSH HOST KEY KEYS-----\nlogin:")
    assert host_keys_from_console(console) == {"ecdsa-sha2-nistp256": "ecdsa-sha2-nistp256 AAAAE2Vj",
                                               "ssh-ed25519": "ssh-ed25519 AAAAC3Nz"}
    assert host_keys_from_console("no keys here") == {}


@pytest.mark.timeout(180)
@MODULE_LOOP
async def test_ec2_against_a_local_aws_endpoint(cloud_registry: PluginRegistry, ec2: dict[str, object]) -> None:
    endpoint = ec2
    fields = {"driver": "ec2", "region": "us-east-1", "driver_args": endpoint, "wait_period_s": 0.2,
              "identityfile": "aws/deploy"}
    create = cloud_task("create", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI)
    created = await cloud_registry.execute(create)
    assert created.ok, created.error
    first = created.result["providerid"]
    assert first.startswith("i-") and created.result["ssh-auth"] == {"user": "ubuntu", "identityfile": "aws/deploy"}
    provider = cloud_registry.provider("libcloud")
    assert isinstance(provider, LibcloudProvider)
    [driver] = provider._drivers.values()

    def states() -> dict[str, str]:
        return {n.id: str(n.state) for n in driver.list_nodes() if n.name == "muster-c1-n1"}

    created = await cloud_registry.execute(create)  # a retry of create: the first machine is destroyed first
    assert created.ok, created.error
    instance = created.result["providerid"]
    assert instance != first and states()[first] == "terminated"
    confirm = next_task(create, created, "confirm")
    confirmed = await cloud_registry.execute(confirm)
    assert confirmed.ok, confirmed.error
    assert confirmed.result["cloud_state"] == "running" and confirmed.ipaddresses["access_v4"]
    typo = await cloud_registry.execute(cloud_task("create", "aws", fields, flavor="t2.mcro", image=UBUNTU_AMI, node="n2"))
    # Its family first, and how many are not shown (it listed a1.2xlarge to c5.24xlarge, as if they were all).
    assert not typo.ok and typo.permanent and "the cloud has no size 't2.mcro' (hardware type 'small'; sizes: t2." in typo.error
    assert "t2.micro" in typo.error and typo.error.endswith(" more)")
    missing = await cloud_registry.execute(cloud_task("create", "aws", fields, flavor="t2.micro", image="ami-00000000", node="n2"))
    assert not missing.ok and "the cloud has no image 'ami-00000000'" in missing.error and missing.permanent
    # A parameter the cloud itself refuses as invalid (HTTP 400) is permanent too.
    bad = await cloud_registry.execute(cloud_task("create", "aws", {**fields, "create_args": {"ex_iamprofile": "no-such-profile"}},
                                                  flavor="t2.micro", image=UBUNTU_AMI, node="n4"))
    assert not bad.ok and bad.permanent, bad.error
    assert bad.error == "create: create node: BaseHTTPError: NoSuchEntity: Instance profile no-such-profile not found"
    deleted = await cloud_registry.execute(next_task(confirm, confirmed, "delete"))
    assert deleted.ok, deleted.error
    assert states() == {first: "terminated", instance: "terminated"}
    again = await cloud_registry.execute(next_task(confirm, confirmed, "delete"))
    assert again.ok and "did not exist any more" not in again.stdout  # terminated machines stay listed a while

    # The endpoint went away after the cloud made n3's machine and before create heard of it:
    # create failed, n3 has no providerid, and the rollback's delete finds the machine by the
    # name every attempt gives it.
    size = next(s for s in driver.list_sizes() if s.id == "t2.micro")
    half_made = driver.create_node(name="muster-c1-n3", size=size, image=driver.get_image(UBUNTU_AMI))
    orphan = cloud_task("delete", "aws", fields, flavor="t2.micro", image=UBUNTU_AMI, node="n3")
    deleted = await cloud_registry.execute(orphan)
    assert deleted.ok and deleted.stdout == f"destroyed {half_made.id} (muster-c1-n3), which a failed create had made"
    assert {n.id: str(n.state) for n in driver.list_nodes() if n.name == "muster-c1-n3"} == {half_made.id: "terminated"}
    again = await cloud_registry.execute(orphan)
    assert again.ok and again.stdout == "nothing to delete: no machine is called muster-c1-n3", again


@pytest.mark.timeout(180)
@MODULE_LOOP
async def test_ec2_refusals_of_a_state_of_the_moment_are_retried(ec2: dict[str, object]) -> None:
    """EC2 sends HTTP 400 for a resource that is busy (a volume still attached, a network whose
    subnets are still there, an instance it does not know yet): such a refusal may pass, unlike
    one of the request itself (no such volume). The codes as moto's server sends them."""
    from libcloud.common.exceptions import BaseHTTPError
    from libcloud.compute.base import Node, StorageVolume
    from libcloud.compute.providers import get_driver
    from libcloud.compute.types import NodeState

    def refusal(fn: Any, *args: Any) -> Any:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - the driver's error, as the provider gets it
            return translate(fn.__name__, fn, err, "aws")
        raise AssertionError(f"{fn.__name__} succeeded")

    endpoint = ec2
    driver: Any = get_driver("ec2")("testing", "testing", region="us-east-1", **endpoint)

    def calls() -> dict[str, Any]:
        size = next(s for s in driver.list_sizes() if s.id == "t2.micro")
        node = driver.create_node(name="busy", size=size, image=driver.get_image(UBUNTU_AMI))
        # libcloud names the volume with CreateTags' ResourceId.0, which AWS takes and moto
        # refuses (its lists start at 1): the volume is made all the same.
        with contextlib.suppress(BaseHTTPError):
            driver.create_volume(1, "disk", location=driver.list_locations()[0])
        [volume] = [v for v in driver.list_volumes() if v.size == 1]  # (not the machine's root volume)
        driver.attach_volume(node, volume, "/dev/sdh")
        network = driver.ex_create_network("10.9.0.0/16")
        driver.ex_create_subnet(network.id, "10.9.1.0/24", "us-east-1a")
        return {
            "attached": refusal(driver.destroy_volume, volume),
            "subnets": refusal(driver.ex_delete_network, network),
            "unknown instance": refusal(driver.destroy_node, Node("i-0123456789abcdef0", "x", NodeState.UNKNOWN, [], [], driver)),
            "no such volume": refusal(driver.destroy_volume, StorageVolume("vol-0123456789abcdef0", "x", 1, driver)),
        }

    said = await asyncio.to_thread(calls)
    assert said["attached"].args[0].startswith("destroy_volume: BaseHTTPError: VolumeInUse: "), said["attached"]
    assert said["subnets"].args[0].startswith("ex_delete_network: BaseHTTPError: DependencyViolation: ")
    assert said["unknown instance"].args[0].startswith("destroy_node: BaseHTTPError: InvalidInstanceID.NotFound: ")
    assert [name for name, err in said.items() if err.permanent] == ["no such volume"]
    assert str(said["attached"]).endswith("(a state of the moment: retried)")
    assert str(said["no such volume"]).startswith("destroy_volume: BaseHTTPError: InvalidVolume.NotFound: ")


def test_ec2_codes_of_a_state_of_the_moment() -> None:
    assert all(passing(code) for code in ("IncorrectInstanceState", "DependencyViolation", "InvalidGroup.InUse",
                                          "InsufficientInstanceCapacity", "RequestLimitExceeded"))
    assert not any(passing(code) for code in ("InvalidParameterValue", "InvalidAMIID.NotFound", "UnauthorizedOperation",
                                              "InvalidInstanceID.Malformed", "InsufficientFunds"))
