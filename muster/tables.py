"""Tables on the command line: boxed for a person at a terminal, plain columns for a pipe.

A boxed table is cut to the terminal's width (80 columns when there is none), so in a pipe a
long task id or a time came out as `n1000.status.yarn-resourcema…`; `grep`, `awk` and `cut`
need every value in full, one row a line."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table


class Output(Console):
    """rich's Console for what the commands print. A reader that stops reading (`muster status J |
    head -1`) ends the command as any of its writes does then (`cli_support.run`: exit 0, said
    nowhere); rich's own answer was SystemExit(1), without a word."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


out = Output(highlight=False, soft_wrap=True, markup=False)


def print_rows(title: str | None, columns: list[str], rows: list[list[str]], console: Console | None = None,
               *, heading: bool = False) -> None:
    """Boxed on a terminal; otherwise plain columns two spaces apart, every value in full, with
    a header line (`heading`: the title first, for output with several tables)."""
    console = console or out
    if console.is_terminal:
        table = Table(title=title, show_edge=title is not None)
        for col in columns:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    if heading and title:
        click.echo(f"{title}:", file=console.file)
    widths = [max(len(x) for x in col) for col in zip(columns, *rows, strict=True)]
    for row in [[c.upper() for c in columns], *rows]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=console.file)
