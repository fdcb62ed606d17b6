"""`python -m muster`: the `muster` command (`muster/cli.py`)."""

from muster.cli import main

main()
