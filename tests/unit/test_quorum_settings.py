import pytest

from actors.controller.quorum_shell import settings


def test_the_retired_switch_is_accepted_on_and_refused_off():
    from actors.config_schema import ConfigError
    from cluster.config import load_broker_config
    assert "kray.metadata.quorum.enable" not in load_broker_config(None, ["kray.metadata.quorum.enable=true"])
    with pytest.raises(ConfigError, match="metadata quorum always keeps the metadata"):
        load_broker_config(None, ["kray.metadata.quorum.enable=false"])


def test_a_dedicated_controller_by_default_and_combined_voters_when_named():
    assert settings.combined_voters({}) == ()
    assert settings.combined_voters({"controller.quorum.voters": ""}) == ()
    assert settings.combined_voters({"controller.quorum.voters": "1,2,3"}) == (1, 2, 3)


def test_process_roles_must_agree_with_the_voters():
    assert settings.combined_voters({"process.roles": "broker"}) == ()
    assert settings.combined_voters({"process.roles": "broker,controller", "controller.quorum.voters": "1,2,3"}) \
        == (1, 2, 3)
    with pytest.raises(ValueError, match="process.roles=broker runs no voter"):
        settings.combined_voters({"process.roles": "broker", "controller.quorum.voters": "1,2,3"})
    with pytest.raises(ValueError, match="needs controller.quorum.voters"):
        settings.combined_voters({"process.roles": "controller,broker"})
    with pytest.raises(ValueError, match="controller-only"):
        settings.combined_voters({"process.roles": "controller"})
    from actors.config_schema import ConfigError
    from cluster.config import load_broker_config
    with pytest.raises(ConfigError, match="process.roles"):
        load_broker_config(None, ["process.roles=controller"])


def test_voters_kafka_form_and_ids():
    assert settings.parse_voters("1@h1:9093,2@h2:9093,3@h3:9093") == (1, 2, 3)
    assert settings.parse_voters("3, 1") == (3, 1)
    for bad in ("", "a@h:1", "1,1", "-2"):
        with pytest.raises(ValueError):
            settings.parse_voters(bad)


def test_configured_voters_must_be_named():
    assert settings.configured_voters({"controller.quorum.voters": "5,7,9"}) == (5, 7, 9)
    with pytest.raises(ValueError, match="controller.quorum.voters"):
        settings.configured_voters({"controller.quorum.voters": ""})


def test_timings_use_kafkas_names():
    cfg = settings.quorum_config({"controller.quorum.election.timeout.ms": "300"}, (1, 2, 3))
    assert cfg.election_timeout_ms == 300 and cfg.fetch_timeout_ms == 2000
