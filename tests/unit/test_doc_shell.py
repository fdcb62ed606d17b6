"""A shell example in the README or a guide runs as written: every variable it reads is set in
the same block. The README's and docs/tracker.md's curl lines read `$TOKEN` and `$TRACKER` that
nothing said how to get (found walking the docs as a user, session 16)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)
READ = re.compile(r"\$\{?([A-Za-z_]\w*)")
SET = re.compile(r"(?:^|[\s;(])(?:export\s+)?([A-Za-z_]\w*)=")
ENVIRONMENT = {"HOME", "PATH", "PWD", "USER"}


def _blocks() -> list[tuple[str, str]]:
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(g.name, b) for g in guides for b in BLOCK.findall(g.read_text())]


def _unset(block: str) -> set[str]:
    seen: set[str] = set(ENVIRONMENT)
    unset: set[str] = set()
    for line in block.splitlines():
        code = line.split(" # ")[0]
        unset |= set(READ.findall(code)) - seen  # read before this line set it (`X=$(...$X)` included)
        seen |= set(SET.findall(code))
    return unset


def test_every_variable_a_shell_example_reads_is_set_in_it() -> None:
    assert [(name, sorted(_unset(block))) for name, block in _blocks() if _unset(block)] == []


def test_the_check_sees_what_it_checks() -> None:
    assert _unset('curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/v1/jobs') == {"TOKEN"}
    assert _unset("export A=$(cat x) B=1\ncurl \"${A}/$B\"") == set()
    assert any("$TRACKER" in block for name, block in _blocks() if name == "tracker.md")


ONE_COMMAND = re.compile(r"^\s*(?:\$ )?((?:MUSTER_TOKEN|MUSTER_CREDENTIALS|MUSTER_TENANT)=\S+) muster [^#\n]*?[;&|]+\s*muster ", re.M)


def test_an_identity_given_to_one_command_is_not_read_as_given_to_the_next() -> None:
    # docs/security.md's day: `MUSTER_TOKEN=mst_alice_... muster watch J ; muster history --cluster
    # c1` ran the history as the super admin, who found its own c1 in tenant default, not alice's.
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{g.name}: {m.group(0).strip()}" for g in guides for m in ONE_COMMAND.finditer(g.read_text())]
    assert found == []
