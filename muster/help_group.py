"""The command groups' `--help`: each subcommand's line whole, wrapped, never cut.

click shortens a subcommand's line in a group's help to what fits beside its name (`Register
static hosts from FILE (YAML or JSON: id,...`), so at 80 columns a third of the lines of
`muster pool --help` ended in "..." (walk of session 27). Every group of `muster` is a
`WholeHelpGroup`: the line is the first sentence of the command's help, wrapped under its name as
the options' help is.
"""

from __future__ import annotations

import sys

import click


class WholeHelpGroup(click.Group):
    group_class = type  # a group made with `@group.group()` is one too

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                # No limit: click's first sentence of the help, as long as it is (write_dl wraps it).
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
