"""Every `kray` tool takes `--command-config client.properties`, as Kafka's tools do (issue 18):
a tool that lacks it cannot reach a secured listener at all."""
import argparse

import pytest

from cluster import cli

BROKER_COMMANDS = {"start", "chaos", "broker"}  # they run brokers (or one of a kray start); not clients of one


class Parsed(Exception):
    pass


def kray_parser(monkeypatch) -> argparse.ArgumentParser:
    """The parser `kray` builds, caught as main() is about to parse."""
    caught = {}

    def parse_args(self, args=None, namespace=None):
        caught["parser"] = self
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with pytest.raises(Parsed):
        cli.main([])
    return caught["parser"]


def test_every_tool_takes_command_config(monkeypatch):
    parser = kray_parser(monkeypatch)
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    tools = sorted(set(commands.choices) - BROKER_COMMANDS)
    assert "metadata-quorum" in tools and "acls" in tools
    lacking = [t for t in tools if "--command-config" not in commands.choices[t]._option_string_actions]
    assert not lacking, f"kray tools without --command-config: {lacking}"


def test_metadata_quorum_reads_the_command_config_before_connecting(tmp_path, capsys):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=BOGUS\n")
    code = cli.main(["metadata-quorum", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(props),
                     "describe", "--status"])
    assert code == 2
    assert "security.protocol=BOGUS" in capsys.readouterr().err
