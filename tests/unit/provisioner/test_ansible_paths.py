"""The Ansible automator hands ansible-playbook absolute paths: it runs in a directory of its own."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from services.provisioner.plugins.builtin.ansible.automator import PATH_ENV, PlaybookNotFound, find_playbook, search_dirs


def test_role_search_dirs_are_absolute_when_given_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(PATH_ENV, "books:other")
    ctx = cast(Any, SimpleNamespace(fields={"playbook_dir": "mine"}))
    assert search_dirs(ctx) == [tmp_path / "mine", tmp_path / "books", tmp_path / "other", tmp_path]


def test_a_playbook_not_found_says_where_it_looked_and_how_to_point_at_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`muster up` started before `export MUSTER_PLAYBOOK_PATH=...` (the README's order the other
    way round): every Ansible action failed `playbook 'nats.yml' not found (looked in: /tmp/x)`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(PATH_ENV, raising=False)
    ctx = cast(Any, SimpleNamespace(fields={}))
    with pytest.raises(PlaybookNotFound) as err:
        find_playbook(ctx, "nats.yml")
    assert str(err.value) == (f"playbook 'nats.yml' not found (looked in: {tmp_path}; $MUSTER_PLAYBOOK_PATH is not set): put it in "
                              "one of them, or name its directory in the action's playbook_dir or in the provisioner's "
                              "$MUSTER_PLAYBOOK_PATH (its environment when it starts: `MUSTER_PLAYBOOK_PATH=DIR muster up`)")
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "books"))
    with pytest.raises(PlaybookNotFound, match=rf"looked in: {tmp_path}/books, {tmp_path}\): put it"):
        find_playbook(ctx, "nats.yml")
