"""Screenshots of the console's main pages for docs/ui.md, from a real `muster demo --keep`.

    .venv/bin/python scripts/ui_screenshots.py [--out docs/ui]

Needs Debian's chromium (/usr/bin/chromium; `sh deploy/system-deps.sh` installs it as root).
Starts `muster demo --keep` in a temporary folder, waits for its job to succeed, takes the
pictures with Playwright, and stops the demo with Ctrl-C (SIGINT), as a person would.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

from muster.bus.connect import read_credentials_file

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-extensions", "--hide-scrollbars"]


def demo(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    proc = subprocess.Popen([sys.executable, "-m", "muster", "demo", "--keep", "--nodes", "4", "--data-dir", str(tmp / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put("")], daemon=True).start()  # type: ignore[union-attr]
    url = ""
    while True:
        line = lines.get(timeout=180)
        if not line:
            raise SystemExit("muster demo --keep stopped early")
        print(line, end="")
        if line.startswith("console: "):
            url = line.split(" ", 1)[1].strip()
        if "kept running" in line:
            return proc, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        proc, job_url = demo(Path(tmp))
        base = job_url.split("/ui/")[0]
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
                context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="UTC",
                                              bypass_csp=True)  # its waits evaluate expressions, which the CSP refuses
                # Signed in as the demo's super admin (its credentials file): the console's session cookie.
                token = read_credentials_file(Path(tmp) / "data" / "credentials")
                context.add_cookies([{"name": "muster_session", "value": token, "url": base}])
                page = context.new_page()

                def shot(path: str, name: str, wait_graph: bool = False, full: bool = True) -> None:
                    page.goto(base + path)
                    if wait_graph:
                        page.wait_for_function("window.musterGraphReady > 0")
                    page.wait_for_timeout(300)
                    page.screenshot(path=str(args.out / name), full_page=full)
                    print("wrote", args.out / name)

                job = job_url.split(base, 1)[1]
                shot(job, "job.png", wait_graph=True, full=False)
                page.goto(base + "/ui/clusters")
                cluster = page.locator("[data-testid=clusters] a").first.get_attribute("href")
                shot(f"{job}?group=stage&task=n1000.install.hdfs-namenode", "job-stage-task.png", wait_graph=True, full=False)
                shot("/ui/clusters", "clusters.png")
                page.goto(base + str(cluster))
                seqs = page.locator("#at").get_attribute("data-seqs").split(",")  # type: ignore[union-attr]
                shot(f"{cluster}?seq={seqs[len(seqs) // 3]}", "cluster-replay.png", full=False)
                shot("/ui/catalog", "catalog.png", full=False)
                shot("/ui/provisioners", "provisioners.png")
                operating(page, base, str(cluster), args.out)
                page.set_viewport_size({"width": 390, "height": 844})
                shot(job, "job-phone.png", wait_graph=True, full=False)
                shot("/ui/clusters/new?template=hadoop-small", "create-phone.png", full=False)
                browser.close()
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)


def operating(page: Any, base: str, cluster: str, out: Path) -> None:
    """The forms of docs/ui.md, "Operating": create, its preview, a refusal at its field, a cluster's changes."""
    page.goto(base + "/ui/clusters/new?template=hadoop-small")
    page.get_by_label("Name", exact=True).fill("analytics")
    page.screenshot(path=str(out / "create.png"), full_page=True)
    page.get_by_role("button", name="Preview").click()
    page.get_by_test_id("plan-id").wait_for()
    page.screenshot(path=str(out / "preview.png"), full_page=True)
    page.goto(base + "/ui/clusters/new?template=hadoop-small")
    page.get_by_test_id("create-form").evaluate("f => { f.noValidate = true; }")
    page.get_by_label("Name", exact=True).fill("too-big")
    page.get_by_label(re.compile("^Nodes")).fill("80")
    page.get_by_role("button", name="Preview").click()
    page.get_by_test_id("error-nodes").wait_for()
    page.screenshot(path=str(out / "create-refused.png"), full_page=False)
    page.goto(base + cluster)
    page.get_by_test_id("op-expand").locator("summary").click()
    page.get_by_test_id("op-restart").locator("summary").click()  # rolling, with a tolerance
    page.get_by_test_id("operations").screenshot(path=str(out / "cluster-operations.png"))
    print("wrote the operating pictures to", out)


if __name__ == "__main__":
    main()
