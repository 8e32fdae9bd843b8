import pytest

from actors.controller.quorum_shell import settings


def test_off_by_default():
    assert not settings.quorum_enabled({})
    assert settings.quorum_enabled({"kray.metadata.quorum.enable": "true"})
    assert not settings.quorum_enabled({"kray.metadata.quorum.enable": "false"})


def test_voters_kafka_form_and_ids():
    assert settings.parse_voters("1@h1:9093,2@h2:9093,3@h3:9093") == (1, 2, 3)
    assert settings.parse_voters("3, 1") == (3, 1)
    for bad in ("", "a@h:1", "1,1", "-2"):
        with pytest.raises(ValueError):
            settings.parse_voters(bad)


def test_voters_must_be_configured_and_local_clusters_default_to_the_lowest_ids():
    assert settings.configured_voters({"controller.quorum.voters": "5,7,9"}) == (5, 7, 9)
    with pytest.raises(ValueError, match="controller.quorum.voters"):
        settings.configured_voters({"kray.metadata.quorum.enable": "true"})
    assert settings.default_voters([7, 2, 5, 4]) == (2, 4, 5)
    assert settings.default_voters([9]) == (9,)


def test_timings_use_kafkas_names():
    cfg = settings.quorum_config({"controller.quorum.election.timeout.ms": "300"}, (1, 2, 3))
    assert cfg.election_timeout_ms == 300 and cfg.fetch_timeout_ms == 2000
