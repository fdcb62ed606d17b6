"""What `muster up` says of each process on `muster reload` is what the process did: one that
exited instead of reloading is not said to have reloaded (walked in session 26: the line was
built from the last word it had said, so a planner that died on the SIGHUP after an earlier
reload read `planner: reloaded`)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from muster.runtime.supervisor import Child, Deployment

STARTS_THEN_DIES_ON_SIGHUP = ("import sys, time; sys.stderr.write('{\"event\": \"started\"}\\n'); sys.stderr.flush(); "
                              "time.sleep(60)")  # (SIGHUP's default action ends it, with no word)


async def test_a_process_that_exits_on_the_reload_is_said_to_have_exited(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path)
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", STARTS_THEN_DIES_ON_SIGHUP,
                                                   stderr=asyncio.subprocess.PIPE)
    child = Child("planner", process, tmp_path / "planner.log")
    deployment.children.append(child)
    ready = asyncio.get_running_loop().create_future()
    child.copier = asyncio.create_task(deployment._copy(child, ready))
    try:
        await asyncio.wait_for(ready, 30)
        child.reload_said = '{"event": "planner reloaded"}'  # an earlier reload's word
        child.reloaded.set()
        said = await deployment.reload_settings(timeout=30)
        assert said == ["planner: exited before it reloaded (killed by SIGHUP); started again, it reads the files at "
                        "its start"], said
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await child.copier
