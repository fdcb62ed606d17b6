"""`--config @file` (and every `@file` argument) reads JSON or YAML: by the file's name, else
JSON, else YAML of a mapping or a list. A YAML config saved under another name
(`/tmp/redis.yaml.bad`) was refused as `not valid JSON`."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.cli_support import CliError, parse_json_arg


def test_a_yaml_file_of_any_name_is_read_and_inline_text_is_json_alone(tmp_path: Path) -> None:
    for name in ("redis.yaml", "redis.yaml.bad", "redis.txt"):
        (tmp_path / name).write_text("redis:\n  primary: 10.0.0.9\n  settings: {maxmemory: 64mb}\n")
        assert parse_json_arg(f"@{tmp_path / name}", "--config") == {"redis": {"primary": "10.0.0.9", "settings": {"maxmemory": "64mb"}}}
    (tmp_path / "c.json").write_text('{"a": 1}')
    assert parse_json_arg(f"@{tmp_path / 'c.json'}", "--config") == {"a": 1}
    with pytest.raises(CliError, match=r"^--config: not valid JSON: Expecting value"):
        parse_json_arg("redis: {primary: x}", "--config")
    (tmp_path / "words").write_text("just some words\n")  # YAML of a string: not a config
    with pytest.raises(CliError, match=r"words: not valid JSON: .* \(nor YAML of a mapping or a list; a file ending .yaml or .yml"):
        parse_json_arg(f"@{tmp_path / 'words'}", "--config")


def test_a_config_strict_json_refuses_is_refused_here_naming_where() -> None:
    """`--config '{"a": NaN}'` was sent and the cluster's config stored null; now the command says
    why before it asks anything."""
    with pytest.raises(CliError, match=r"^--config is not valid JSON: NaN is not a JSON number \(JSON has no NaN or Infinity\), at a$"):
        parse_json_arg('{"a": NaN}', "--config")
    with pytest.raises(CliError, match=r"^--config nests 40 levels deep; the limit is 32$"):
        parse_json_arg("[" * 40 + "]" * 40, "--config")
