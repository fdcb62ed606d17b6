"""Browser tests of the console (docs/ui.md): a real `muster up` (nats-server and the four
services as processes), the `muster` CLI, and Debian's chromium driven by Playwright.

One deployment and one browser serve the whole package; each test gets its own browser
context (cookies) and its own clusters. The services export their spans over OTLP/HTTP to a
receiver this package runs (`Muster.traces`; test_traces.py reads them). Without
/usr/bin/chromium every test here skips with one line naming the package (`make test` installs
it through deploy/system-deps.sh).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from muster.bus.connect import read_credentials_file
from muster.tls.context import CA_ENV
from tests import cli_in_process


def _otlp() -> Any:
    """tests/fault/otlp.py, the OTLP receiver (a sibling top-level package of the tests)."""
    name = "_muster_otlp_receiver"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "fault" / "otlp.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


if TYPE_CHECKING:
    from tests.fault.otlp import OnThread, Received
else:
    OnThread, Received = _otlp().OnThread, _otlp().Received

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).parents[2]
DEMO = ROOT / "muster" / "demo" / "catalog"
START_S = 90.0
CHROMIUM_ARGS = [  # docs: machine-facts.md; without the network flags chromium calls home at every start
    "--no-sandbox", "--headless=new", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
    "--metrics-recording-only", "--no-default-browser-check",
]

pytestmark = pytest.mark.browser


def write_catalog(folder: Path) -> Path:
    """The demo catalog with quick simulated tasks, plus what the tests need: a slow provider and
    a middling one (to catch a job running), a service whose install always fails (retries,
    rollback), and a template of one service (a job of a few tasks)."""
    shutil.copytree(DEMO, folder)
    sim = folder / "providers" / "sim.json"
    body = json.loads(sim.read_text())
    body["provisioner"]["latency_ms"] = "60-120"
    sim.write_text(json.dumps(body))
    for name, latency in (("slowsim", "700-900"), ("midsim", "250-350")):
        slower = {**body, "name": name, "description": f"simulated cloud, {latency} ms a task", "provisioner": {**body["provisioner"], "latency_ms": latency}}
        (folder / "providers" / f"{name}.json").write_text(json.dumps(slower))
    for kind in ("hardwaretypes", "imagetypes"):
        for path in (folder / kind).glob("*.json"):
            entity = json.loads(path.read_text())
            entity["providermap"]["slowsim"] = entity["providermap"]["midsim"] = entity["providermap"]["sim"]
            path.write_text(json.dumps(entity))
    (folder / "services" / "broken.json").write_text(json.dumps({
        "name": "broken", "description": "install always fails",
        "dependencies": {"install": {"requires": ["base"]}},
        "provisioner": {"actions": {"install": {"type": "simulated", "fields": {"script": "install broken", "failure_rate": "1"}},
                                    "remove": {"type": "simulated", "fields": {"script": "remove broken"}}}}}))
    (folder / "services" / "talky.json").write_text(json.dumps({
        "name": "talky", "description": "install reports progress lines, then runs a while",
        "dependencies": {"install": {"requires": ["base"]}},
        "provisioner": {"actions": {"install": {"type": "simulated", "fields": {
            "script": "install talky", "progress": "ok: [n1] TASK [install redis];changed: [n1] TASK [configure redis]",
            "latency_ms": "15000"}}, "remove": {"type": "simulated", "fields": {"script": "remove talky"}}}}}))
    template = json.loads((folder / "clustertemplates" / "hadoop-small.json").read_text())
    for name, provider, services in (("slow-small", "slowsim", None), ("mid-small", "midsim", None), ("broken-small", "sim", ["base", "broken"]),
                                     ("talky-small", "sim", ["base", "talky"]), ("tiny-small", "sim", ["base"])):
        t = json.loads(json.dumps(template))
        t["name"] = name
        t["defaults"]["provider"] = provider
        if services:
            t["defaults"]["services"] = services
            t["compatibility"]["services"] = services
            t["constraints"] = {"size": {"min": 1, "max": 10}}
        (folder / "clustertemplates" / f"{name}.json").write_text(json.dumps(t))
    return folder


@dataclass
class Muster:
    data_dir: Path
    tracker: str
    nats: str
    catalog: Path
    traces: OnThread

    def cli(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`muster ARGS` in the test's process (tests/cli_in_process.py: these tests are about the
        console), or as a process of its own where the test gives it an environment (the traces)."""
        process = env is not None
        env = {**{k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TRACKER_URL")}, **(env or {})}
        if not process:
            code, out, err = cli_in_process.run_sync(args, env, 60)
            if check and code:
                raise subprocess.CalledProcessError(code, ["muster", *args], out, err)
            return subprocess.CompletedProcess(["muster", *args], code, out, err)
        return subprocess.run([sys.executable, "-m", "muster", *args], capture_output=True, text=True, timeout=60,
                              check=check, env=env, cwd=self.data_dir.parent)

    def create(self, name: str, template: str, nodes: int, tenant: str = "default") -> dict[str, Any]:
        """`muster cluster create` as a user types it; its JSON answer (job_id, cluster_id)."""
        out = self.cli("cluster", "create", name, "-t", template, "-n", str(nodes), "--tenant", tenant,
                       "--data-dir", str(self.data_dir), "--json")
        answer = json.loads(out.stdout.splitlines()[0])
        assert answer["type"] == "Accepted", answer
        return answer


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> dict[str, str]:
    """The `key: value` lines `muster up` prints, until `marker` (read by a thread: a pipe's
    readline has no deadline)."""
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"muster up did not say {marker!r} within {timeout} s; saw {seen}") from None
        if not line:
            raise AssertionError(f"muster up exited before {marker!r}; saw {seen}")
        key, _, value = line.partition(":")
        seen[key.strip()] = value.strip()
        if marker in line:
            return seen


@pytest.fixture(scope="package")
def muster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Muster]:
    if not CHROMIUM.exists():
        pytest.skip("browser tests need the Debian package chromium (deploy/system-deps.sh installs it)")
    root = tmp_path_factory.mktemp("console")
    catalog = write_catalog(root / "catalog")
    notifier_files(root / "data")
    traces = OnThread()
    env = {**{k: v for k, v in os.environ.items() if k != "NATS_URL"}, **traced(traces.url)}
    proc = subprocess.Popen(  # over HTTPS, as a console beyond loopback must be (docs/security.md, "TLS")
        [sys.executable, "-m", "muster", "up", "--tls", "--data-dir", str(root / "data"), "--tracker-port", "0", "--catalog", str(catalog)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=root, start_new_session=True,
    )
    try:
        seen = _read_until(proc, "muster is up", START_S)
        with pytest.MonkeyPatch.context() as env_:
            # The tests' own clients trust its CA: in-process (muster.bus.connect), and Playwright's
            # HTTP client (`page.request`, in its Node driver, which reads NODE_EXTRA_CA_CERTS).
            env_.setenv(CA_ENV, str(root / "data" / "tls" / "ca.pem"))
            env_.setenv("NODE_EXTRA_CA_CERTS", str(root / "data" / "tls" / "ca.pem"))
            yield Muster(root / "data", seen["tracker"], seen["nats"], catalog, traces)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        traces.stop()


HOOK_SECRET = "console-hook"
"""The signing secret of tenant default's webhooks in the package's notifier (`secret://console-hook`)."""


def notifier_files(data: Path) -> None:
    """The notifier's secrets file and webhook allow file, made before `muster up` (which keeps
    them): tenant default's signing secret `console-hook`, and its webhooks allowed to loopback,
    where test_governance_forms.py runs a receiver (only tenant default's: `default=`)."""
    data.mkdir(mode=0o700)
    secret = base64.b64encode(os.urandom(24)).decode()
    for name, text in (("notifier-secrets.json", json.dumps({"@tenants": {"default": {"@secrets": {HOOK_SECRET: secret}}}})),
                       ("webhook-allow", "default=127.0.0.1  # test_governance_forms.py's receiver\n")):
        fd = os.open(data / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)


def hook_secret(muster: Muster) -> bytes:
    secrets = json.loads((muster.data_dir / "notifier-secrets.json").read_text())
    return str(secrets["@tenants"]["default"]["@secrets"][HOOK_SECRET]).encode()


TRACE_URL = "http://127.0.0.1:16686/trace/{trace_id}"


def traced(receiver: str) -> dict[str, str]:
    """The variables that turn tracing on (docs/tracing.md), spans sent to `receiver` a fifth of a
    second after they end rather than the SDK's five."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200", "MUSTER_TRACE_URL": TRACE_URL}


@pytest.fixture(scope="package")
def browser(muster: Muster) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, trust_tracker(muster)])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, muster: Muster) -> Iterator[Any]:
    context = browser.new_context(base_url=muster.tracker, viewport={"width": 1280, "height": 900}, timezone_id="Europe/Berlin")
    # Signed in as the super admin `muster up` made (docs/security.md): the console's session cookie.
    token = read_credentials_file(muster.data_dir / "credentials")
    context.add_cookies([{"name": "muster_session", "value": token, "url": muster.tracker}])
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # What a script logs as an error, or the browser does for the page (a refused resource, a
    # bad attribute); not the status of a page a test opens to see its 404 or 403.
    page.on("console", lambda m: errors.append(f"console: {m.text}")
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    try:
        yield page
        assert not errors, f"script errors on the page: {errors}"
    finally:
        context.close()


def trust_tracker(muster: Muster) -> str:
    """Chromium's pin of the tracker's key: the browser accepts that certificate and no other
    (its trust store is not the test's to change: a user imports <data-dir>/tls/ca.pem instead)."""
    cert = x509.load_pem_x509_certificate((muster.data_dir / "tls" / "servers" / "tracker.pem").read_bytes())
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return f"--ignore-certificate-errors-spki-list={base64.b64encode(hashlib.sha256(spki).digest()).decode()}"


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    """Every line the process prints, then "" when it closes its output."""
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put("")
