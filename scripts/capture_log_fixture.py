"""A log written by another (older) muster, as a fixture for tests/integration/upgrade/.

    .venv/bin/python scripts/capture_log_fixture.py run OLD_MUSTER OUT_PREFIX [--note TEXT]
    .venv/bin/python scripts/capture_log_fixture.py dump DATA_DIR OUT.jsonl.gz [--note TEXT]

`run` drives OLD_MUSTER (the `muster` of a checkout of the old commit, in its own venv) through
the scenario the upgrade test checks, in a temporary data directory with auth as `muster up`
has it: `muster up` with the demo catalog (tasks of 30-90 ms), a 3-node create, a configure, an
expand's dry run (a saved plan), then a 10-node create stopped mid-job by SIGINT to `muster up`
(its Ctrl-C) a second after it was accepted. It writes OUT_PREFIX.jsonl.gz (the dump, below)
and OUT_PREFIX.expected.json: what the OLD code answered (the first cluster shown, replayed at a
sequence between its create and its configure, the plan's id, the stopped job's ids).

`dump`: DATA_DIR is the `--data-dir` of a `muster up` that has been stopped (Ctrl-C): this starts a
nats-server of its own on that store, with the store's own `nats.conf` (on a free port), reads
every message of the streams that hold history (the log, its bodies, the task queue if it is on
file, the snapshots and other KV buckets that outlive a restart), and stops the server by its
PID. The store is only read. tests/integration/upgrade/ loads the file into a fresh server and
runs today's services over it; docs/bus.md, "Upgrades", tells when and how to capture one.

Each line of the output is one JSON document: first `{"fixture": ...}` (format, note), then
per stream `{"stream", "config"}` followed by its messages `{"stream", "seq", "subject",
"headers": [[name, value], ...], "data"}` (`data` is text; a body that is not UTF-8 comes as
`"b64"` instead), in sequence order.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.js.errors import NotFoundError

from muster.bus.server import free_port, nats_server_binary

FORMAT = 1
EPHEMERAL = ("KV_leases", "KV_presence")
"""Leases and presence expire within seconds of a stop: an upgraded deployment finds them gone."""


def log_user(conf: str) -> tuple[str, str]:
    """The user of the account that holds the streams (`muster-auth-log` in MUSTER), from the conf."""
    found = re.search(r'MUSTER\s*\{[^\n]*user:\s*"([^"]+)",\s*password:\s*"([^"]+)"', conf)
    if found is None:
        sys.exit("no MUSTER account with a user in the store's nats.conf: is DATA_DIR a `muster up` data directory?")
    return found.group(1), found.group(2)


def message_doc(stream: str, msg: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"stream": stream, "seq": msg.seq, "subject": msg.subject,
                           "headers": [[k, v] for k, v in (msg.headers or {}).items()]}
    try:
        doc["data"] = (msg.data or b"").decode("utf-8")
    except UnicodeDecodeError:
        doc["b64"] = base64.b64encode(msg.data).decode()
    return doc


async def dump(url: str, user: str, password: str) -> list[dict[str, Any]]:
    nc = Client()
    await nc.connect(servers=[url], user=user, password=password, connect_timeout=10)
    try:
        js = nc.jetstream()
        docs: list[dict[str, Any]] = []
        for name in sorted([s.config.name for s in await js.streams_info()]):
            if name in EPHEMERAL:
                continue
            info = await js.stream_info(name)
            if str(getattr(info.config.storage, "value", info.config.storage)) == "memory":
                continue  # gone at the stop
            docs.append({"stream": name, "config": info.config.as_dict()})
            seq = info.state.first_seq
            while info.state.messages and seq <= info.state.last_seq:
                try:
                    msg = await js.get_msg(name, seq=seq, next=True)
                except NotFoundError:
                    break
                docs.append(message_doc(name, msg))
                seq = (msg.seq or seq) + 1
        return docs
    finally:
        await nc.close()


def quick_catalog(source: Path, into: Path) -> Path:
    """The old checkout's demo catalog with tasks of 30-90 ms: the upgrade test resumes the
    stopped job in a few seconds."""
    shutil.copytree(source, into)
    for provider in (into / "providers").glob("*.json"):
        doc = json.loads(provider.read_text())
        doc.setdefault("provisioner", {})["latency_ms"] = "30-90"
        provider.write_text(json.dumps(doc))
    return into


def run(old_muster: str, catalog: Path, tmp: Path) -> tuple[Path, dict[str, Any]]:
    data = tmp / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_TRACKER_URL", "MUSTER_CREDENTIALS")}
    env["MUSTER_DATA_DIR"] = str(data)

    def cli(*args: str) -> list[dict[str, Any]]:
        done = subprocess.run([old_muster, *args, "--json"], env={**env, "MUSTER_CREDENTIALS": str(data / "credentials")}, cwd=tmp, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            sys.exit(f"`muster {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
        try:
            return [json.loads(done.stdout)]  # one document, indented (`replay --json`)
        except json.JSONDecodeError:
            return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    up = subprocess.Popen([old_muster, "up", "--data-dir", str(data), "--tracker-port", "0", "--catalog", str(catalog)],
                          env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert up.stdout is not None
        said = []
        for line in up.stdout:  # `muster up` says when it is up
            said.append(line)
            if "muster is up" in line:
                break
        else:
            sys.exit(f"`muster up` exited ({up.wait()}) before it was up: {''.join(said[-5:])}")
        threading.Thread(target=up.stdout.read, daemon=True).start()
        alpha = cli("cluster", "create", "alpha", "-t", "hadoop-small", "-n", "3", "--wait")[0]
        cluster = alpha["cluster_id"]
        after_create = cli("replay", "--cluster", cluster)[0]["as_of"]["seq"]
        cli("cluster", "configure", cluster, json.dumps({"hdfs": {"replication": 3}}), "--wait")
        expected: dict[str, Any] = {
            "alpha": {"cluster_id": cluster, "create_job": alpha["job_id"], "shown": cli("cluster", "show", cluster)[0],
                      "seq_after_create": after_create,
                      "replayed_after_create": cli("replay", "--cluster", cluster, "--seq", str(after_create))[0]},
        }
        plan = cli("cluster", "expand", cluster, "--nodes", "5", "--dry-run")[-1]
        expected["plan"] = {k: plan[k] for k in ("plan_id", "cluster_version", "catalog_version")}
        beta = cli("cluster", "create", "beta", "-t", "hadoop-small", "-n", "10")[0]
        expected["stopped"] = {"cluster_id": beta["cluster_id"], "job_id": beta["job_id"]}
        time.sleep(1.0)  # the scenario: Ctrl-C a second after the create was accepted
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C sends: to `muster up` and its children
            up.wait(timeout=60)
    return data, expected


def write(out: Path, docs: list[dict[str, Any]], note: str) -> None:
    with gzip.open(out, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"fixture": "muster-log", "format": FORMAT, "note": note}) + "\n")
        for doc in docs:
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")
    counts: dict[str, int] = {}
    for doc in docs:
        counts[doc["stream"]] = counts.get(doc["stream"], 0) + ("seq" in doc)
    print(f"{out}: {out.stat().st_size} bytes; messages per stream: {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_args = sub.add_parser("run", help="run the scenario with an old muster, then dump")
    run_args.add_argument("old_muster", help="the old checkout's `muster` (e.g. OLD/.venv/bin/muster)")
    run_args.add_argument("out_prefix", type=Path)
    run_args.add_argument("--catalog", type=Path, help="default: the old checkout's muster/demo/catalog")
    dump_args = sub.add_parser("dump", help="dump a stopped deployment's store")
    dump_args.add_argument("data_dir", type=Path)
    dump_args.add_argument("out", type=Path)
    for p in (run_args, dump_args):
        p.add_argument("--note", default="", help="which commit and commands made this log")
    args = parser.parse_args()
    if args.command == "dump":
        write(args.out, dump_store(args.data_dir), args.note)
        return
    checkout = Path(args.old_muster).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="muster-capture-") as tmp:
        catalog = quick_catalog(args.catalog or checkout / "muster" / "demo" / "catalog", Path(tmp) / "catalog")
        data, expected = run(args.old_muster, catalog, Path(tmp))
        write(Path(f"{args.out_prefix}.jsonl.gz"), dump_store(data), args.note)
    expected["note"] = args.note
    Path(f"{args.out_prefix}.expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def dump_store(data_dir: Path) -> list[dict[str, Any]]:
    conf_text = (data_dir / "nats" / "nats.conf").read_text()
    user, password = log_user(conf_text)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="muster-capture-") as tmp:
        conf = Path(tmp) / "nats.conf"
        conf.write_text(re.sub(r"(?m)^listen: .*$", f"listen: 127.0.0.1:{port}", conf_text))
        conf.chmod(0o600)
        proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # the server says when it accepts clients
                if b"Server is ready" in line:
                    break
            else:
                sys.exit(f"nats-server exited (code {proc.wait()}) before it was ready")
            # Its log goes on: read to the end, or a full pipe would stop the server.
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return asyncio.run(dump(f"nats://127.0.0.1:{port}", user, password))
        finally:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
