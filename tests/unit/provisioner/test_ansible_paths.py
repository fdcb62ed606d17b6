"""The Ansible automator hands ansible-playbook absolute paths: it runs in a directory of its own."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from services.provisioner.plugins.builtin.ansible.automator import PATH_ENV, search_dirs


def test_role_search_dirs_are_absolute_when_given_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(PATH_ENV, "books:other")
    ctx = cast(Any, SimpleNamespace(fields={"playbook_dir": "mine"}))
    assert search_dirs(ctx) == [tmp_path / "mine", tmp_path / "books", tmp_path / "other", tmp_path]
