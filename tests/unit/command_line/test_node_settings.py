"""The node's settings are declared once (dht/config.py): the flags table of
docs/operating.md and the flags `cluster` passes on are made from the declarations."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.command_line.node_flags import flags_table, node_config
from dht.command_line.parser import build_parser
from dht.config import node_settings
from dht.testbed.node_processes import passed_settings

OPERATING = Path(__file__).resolve().parents[3] / "docs" / "operating.md"


def operating_flags_table() -> str:
    lines = OPERATING.read_text().splitlines()
    start = lines.index("| flag | default | meaning |")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end]) + "\n"


def test_the_flags_table_is_the_one_the_declarations_make() -> None:
    assert operating_flags_table() == flags_table(), (
        "docs/operating.md's flags table is out of date; paste in the output of "
        "`.venv/bin/python -m dht.command_line.node_flags`"
    )


def test_cluster_passes_every_shared_setting_on_to_its_nodes() -> None:
    """What `cluster` was given reaches each node's `NodeConfig` unchanged (the secret
    through the environment, so not here)."""
    cluster_args = build_parser().parse_args(
        ["cluster", "--vnodes", "7", "--durability", "none", "--no-metrics", "--clock-skew", "-2.5"]
    )
    node = ["node", "--port", "9000", "--data-dir", "d", "--cluster", "http://127.0.0.1:9000"]
    node_args = build_parser().parse_args([*node, *passed_settings(cluster_args)])
    config = node_config(node_args)
    for flag in node_settings():
        if flag.setting.scope == "shared" and flag.setting.environment is None:
            assert getattr(config, flag.name) == getattr(cluster_args, flag.name), flag.flag
    assert (config.vnodes, config.durability, config.metrics) == (7, "none", False)


def test_sync_writes_is_deprecated_for_the_group_commit_it_now_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--sync-writes` asked for synced writes: the default gives them now (SPEC.md rule
    10.2), so the flag still parses, to `--durability group`, and says so."""
    node = ["node", "--port", "9000", "--data-dir", "d", "--cluster", "http://127.0.0.1:9000"]
    assert node_config(build_parser().parse_args(node)).durability == "group"
    config = node_config(build_parser().parse_args([*node, "--sync-writes"]))
    assert config.durability == "group"
    assert "--sync-writes is deprecated" in capsys.readouterr().err
    assert build_parser().parse_args(["cluster", "--sync-writes"]).durability == "group"
