"""Every `muster <command> <subcommand>` the README and the guides name inline exists: docs/planner.md
sent operators to `muster cluster status`, which is `muster cluster show` (found walking the
leases as an operator, session 16). Alternatives (`list|show`) are each checked; the words after
a command that takes no subcommand are its arguments."""

from __future__ import annotations

import re
from pathlib import Path

import click

from muster.cli import main

ROOT = Path(__file__).parents[2]
SPAN = re.compile(r"`muster ([^`]+)`")
WORD = re.compile(r"[a-z][a-z-]*")
NOT_COMMANDS = {"create"}  # docs/tracing.md: `muster create` is the CLI's root span, not a command


def _missing(group: click.Group, words: list[str]) -> str | None:
    if not words:
        return None
    for alternative in words[0].split("|"):
        if not WORD.fullmatch(alternative):
            return None
        command = group.get_command(click.Context(group), alternative)
        if command is None:
            return alternative
        if isinstance(command, click.Group) and (deeper := _missing(command, words[1:])):
            return f"{alternative} {deeper}"
    return None


def test_every_command_the_docs_name_exists() -> None:
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [f"{guide.name}: `muster {span}` ({unknown!r} is no command)"
               for guide in guides for span in SPAN.findall(guide.read_text())
               if span.split()[0] not in NOT_COMMANDS and (unknown := _missing(main, span.split()))]
    assert missing == []
