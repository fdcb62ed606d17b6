"""Every `muster <command> <subcommand>` the README and the guides name inline exists: docs/planner.md
sent operators to `muster cluster status`, which is `muster cluster show` (found walking the
leases as an operator, session 16). Alternatives (`list|show`) are each checked; the words after
a command that takes no subcommand are its arguments. And every option a doc gives a command, in
text or in an example, is one the command takes (a guard: a new user's walk found none stale)."""

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
    """The examples' guides too: examples/catalog-real/README.md's by-hand steps were not read."""
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("**/*.md"))]
    missing = [f"{guide.name}: `muster {span}` ({unknown!r} is no command)"
               for guide in guides for span in SPAN.findall(guide.read_text())
               if span.split()[0] not in NOT_COMMANDS and (unknown := _missing(main, span.split()))]
    assert missing == []


LINE = re.compile(r"(?:^|[`\s(;|&$])(?:\.venv/bin/)?muster ([^`\n#;|&)]+)")


def _options_named(guide: Path) -> list[str]:
    """Every `--flag` a `muster ...` line of `guide` gives a command that does not take it: up to
    the command's description (three spaces on) or the operation a schedule carries (after `--`)."""
    found = []
    for match in LINE.finditer(guide.read_text()):
        words = re.split(r"\s{3,}", match.group(1))[0].split()
        if "--" in words:
            words = words[:words.index("--")]
        command: click.Command = main
        taken = 0
        while isinstance(command, click.Group) and taken < len(words):
            sub = command.get_command(click.Context(command), words[taken])
            if sub is None:
                break
            command, taken = sub, taken + 1
        if isinstance(command, click.Group) or not taken or words[0] in NOT_COMMANDS:
            continue
        known = {o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
        for word in words[taken:]:
            for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", word):
                if flag not in known and not word.startswith(("'", '"', "{")):
                    found.append(f"{guide.name}: `muster {' '.join(words[:taken])}` has no {flag} ({match.group(1).strip()[:80]})")
    return found


def test_every_option_the_docs_give_a_command_is_one_it_takes() -> None:
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("**/*.md"))]
    assert [problem for guide in guides for problem in _options_named(guide)] == []


SHARED = {"--nats-url", "--tracker-url", "--data-dir", "--json", "--tenant", "--by", "--timeout", "--request-id", "--wait",
          "--dry-run", "--if-version"}
"""Options many commands share, documented once (docs/client.md) rather than per command."""


def _leaves(group: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, click.Command]]:
    if not isinstance(group, click.Group):
        return [(" ".join(path), group)]
    ctx = click.Context(group)
    return [leaf for name in group.list_commands(ctx) for leaf in _leaves(group.get_command(ctx, name), (*path, name))]  # type: ignore[arg-type]


def test_every_option_a_command_takes_is_named_in_the_docs() -> None:
    """The other way round (walk of session 27): `catalog history --kind`, `token create --name`,
    `pool show --no-hosts`, `pool configure --default-priority`, `muster auth --print-env` were
    in `--help` and nowhere in README or docs/."""
    text = "\n".join(g.read_text() for g in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("**/*.md")])
    unnamed = [f"muster {path} {max(option.opts, key=len)}" for path, command in _leaves(main) for option in command.params
               if isinstance(option, click.Option) and not option.hidden and option.name != "help"
               and not SHARED & set(option.opts)
               and not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in (*option.opts, *option.secondary_opts))]
    assert unnamed == []


HTTP = re.compile(r"(?:\b(GET|POST|PUT|DELETE) |\$TRACKER|<tracker>)(/v1/[A-Za-z0-9_/{}<>$.\-]*)\?([A-Za-z0-9_=&\-|\\{}<>.:$,\"*]*)")


def test_every_query_parameter_the_docs_give_a_route_is_one_it_takes() -> None:
    """The tracker refuses a query parameter a route does not take (a 400 naming it: session 33,
    where `?dryrun=true` ran the operation it meant to preview): an example in the docs with a
    stale or misspelt one would be refused as written. The routes' parameters are the OpenAPI
    document's."""
    from services.tracker import contract

    routes = [(method.upper(), re.compile("^" + re.sub(r"\{[^}]+\}", "[^/?]+", path) + "$"),
               {p["name"] for p in op.get("parameters", ()) if p["in"] == "query"})
              for path, methods in contract.document()["paths"].items() for method, op in methods.items()]
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("**/*.md"))]
    wrong = []
    for guide in guides:
        for method, path, query in HTTP.findall(guide.read_text()):
            # (`?subject=\|job=`: alternatives; `hosts=true\|false`: values, which name nothing)
            named = {pair.split("=")[0] for pair in re.split(r"[&|]", query.replace("\\|", "|")) if "=" in pair}
            path = path.replace("<", "{").replace(">", "}")
            found = [known for verb, rx, known in routes if rx.match(path) and (not method or verb == method)]
            if not found or not any(named <= known for known in found):
                wrong.append(f"{guide.name}: {method or ''} {path}?{query} ({'no such route' if not found else 'takes ' + str(found)})")
    assert wrong == []
