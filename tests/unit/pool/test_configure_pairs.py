"""`muster pool configure`'s TENANT=N options read as a person writes them: each bad one refused
naming what is wrong with it (walk of session 33: `--max-nodes acme=-1` was told only "use
TENANT=NUMBER", `--priority =3` "tenants..[key]: '' is not allowed here")."""

from __future__ import annotations

import pytest

from muster.cli_support import CliError
from services.pool.cli import _pairs


@pytest.mark.parametrize("given,said", [
    ("acme=-1", "--max-nodes 'acme=-1': '-1' is not a whole number, 0 or more: use TENANT=NUMBER"),
    ("acme=x", "--max-nodes 'acme=x': 'x' is not a whole number, 0 or more: use TENANT=NUMBER"),
    ("=3", "--max-nodes '=3': '' is not a tenant's name (1-128 letters, digits, '-' or '_'): use TENANT=NUMBER"),
    ("ac me=3", "--max-nodes 'ac me=3': 'ac me' is not a tenant's name (1-128 letters, digits, '-' or '_'): use TENANT=NUMBER"),
    ("acme", "--max-nodes 'acme': use TENANT=NUMBER"),
])
def test_a_bad_pair_is_refused_naming_what_is_wrong(given: str, said: str) -> None:
    with pytest.raises(CliError) as raised:
        _pairs((given,), "--max-nodes")
    assert str(raised.value) == said


def test_good_pairs_are_taken() -> None:
    assert _pairs(("acme=0", "beta-2=10"), "--priority") == {"acme": 0, "beta-2": 10}
