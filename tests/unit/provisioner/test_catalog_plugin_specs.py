"""The plugins `muster catalog validate|apply --plugins-dir` checks a catalog against refuse what a
provisioner would refuse at its start: a name defined twice, an entry point with no module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.provisioner.plugins.descriptor import PluginError
from services.provisioner.plugins.specs import catalog_plugins


def _plugin(root: Path, folder: str, name: str, module: str | None) -> Path:
    d = root / folder
    d.mkdir(parents=True)
    (d / "plugin.json").write_text(json.dumps({"name": name, "type": "automator", "version": "1.0.0", "description": "x",
                                               "actions": ["install"], "entry_point": "mine:Mine", "fields": {}}))
    if module is not None:
        (d / f"{module}.py").write_text("")
    return d


def test_a_plugin_folder_checks_as_the_provisioner_loads_it(tmp_path: Path) -> None:
    _plugin(tmp_path / "good", "mine", "mine-auto", "mine")
    assert "mine-auto" in {s.name for s in catalog_plugins([tmp_path / "good"]).specs}

    _plugin(tmp_path / "twice", "shell2", "shell", "mine")  # the built-in automator's name
    with pytest.raises(PluginError, match="automator plugin 'shell' is already defined by"):
        catalog_plugins([tmp_path / "twice"])

    _plugin(tmp_path / "nomodule", "ghost", "ghost", None)
    with pytest.raises(PluginError, match="field 'entry_point': no module 'mine' in"):
        catalog_plugins([tmp_path / "nomodule"])
