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
