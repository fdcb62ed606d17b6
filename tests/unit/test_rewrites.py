"""tests/rewrites.py: the assert rewrites written before the workers start are what pytest reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from tests import rewrites

MODULE = '''
def test_it():
    left, right = 1, 2
    assert left == right
'''


def test_a_module_written_before_is_read_by_pytest_with_its_asserts_rewritten(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text(MODULE)
    (tmp_path / "notes.py").write_text("x = 1\n")
    assert rewrites.modules_under([tmp_path]) == [module]
    assert rewrite._read_pyc(module, rewrites.cache_of(module)) is None

    assert rewrites.write_caches(pytestconfig, [module], processes=1) == 1
    code = rewrite._read_pyc(module, rewrites.cache_of(module))  # as pytest's import hook reads it
    assert code is not None
    space: dict[str, object] = {}
    exec(code, space)
    with pytest.raises(AssertionError, match="assert 1 == 2"):  # a plain assert says nothing
        space["test_it"]()  # type: ignore[operator]

    assert rewrites.write_caches(pytestconfig, [module], processes=1) == 0  # current: not again
    module.write_text(MODULE.replace("1, 2", "1, 3"))
    assert rewrites.write_caches(pytestconfig, [module], processes=1) == 1  # changed: again


def test_the_plugins_packages_are_found_whole() -> None:
    found = rewrites.plugin_modules(["xdist", "pytest_timeout", "no_such_module_here"])
    assert Path(sys.modules["xdist.scheduler"].__file__ or "") in found
    assert any(p.name == "pytest_timeout.py" for p in found)
