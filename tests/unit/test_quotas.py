"""Client quotas (actors/quotas.py and the controller's records): Kafka's entity and value rules, describe's
matching, the resolution order of a (user, client id), and the rate and throttle time a gateway computes."""
import pytest

from actors import quotas
from actors.controller.core import ControllerCore
from protocol.errors import ErrorCode as E

ALICE, ALICE_APP = (("user", "alice"),), (("client-id", "app"), ("user", "alice"))
DEFAULT_USER, APP = (("user", None),), (("client-id", "app"),)


def core() -> ControllerCore:
    return ControllerCore({}, "cluster")


def test_alter_client_quotas_validates_each_entry_as_kafka_and_commits_only_the_good_ones():
    c = core()
    results, outcome = c.alter_client_quotas([
        ([("user", "alice"), ("client-id", "app")], [("producer_byte_rate", 1024.0, False)]),
        ([("user", "bob")], [("no_such_key", 1.0, False)]),
        ([("user", "carol")], [("producer_byte_rate", 1.5, False)]),
        ([("ip", "1.2.3.4"), ("user", "x")], [("connection_creation_rate", 5.0, False)]),
        ([("ip", "not-an-ip")], [("connection_creation_rate", 5.0, False)]),
        ([], [("producer_byte_rate", 1.0, False)]),
        ([("user", None)], [("request_percentage", 12.5, False), ("consumer_byte_rate", 2048.0, False)]),
        ([("user", "dave")], [("consumer_byte_rate", 0.0, False)]),
    ])
    assert [error for error, _ in results] == [0, E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST,
                                               E.INVALID_REQUEST, E.INVALID_REQUEST, 0, E.INVALID_REQUEST]
    assert c.client_quotas == {ALICE_APP: {"producer_byte_rate": 1024.0},
                               DEFAULT_USER: {"request_percentage": 12.5, "consumer_byte_rate": 2048.0}}
    assert len(outcome.records) == 3
    replayed = core()
    for record in outcome.records:
        replayed.apply(record)
    assert replayed.client_quotas == c.client_quotas
    # removing the last key removes the entity; validate_only changes nothing
    c.alter_client_quotas([([("user", "alice"), ("client-id", "app")], [("producer_byte_rate", 0, True)])])
    assert ALICE_APP not in c.client_quotas
    results, outcome = c.alter_client_quotas([([("user", "eve")], [("producer_byte_rate", 10.0, False)])],
                                             validate_only=True)
    assert results == [(0, None)] and not outcome.records and (("user", "eve"),) not in c.client_quotas


QUOTAS = {ALICE: {"producer_byte_rate": 1.0}, ALICE_APP: {"producer_byte_rate": 2.0},
          DEFAULT_USER: {"consumer_byte_rate": 3.0}, APP: {"producer_byte_rate": 4.0},
          (("client-id", None),): {"producer_byte_rate": 5.0}}


@pytest.mark.parametrize("components,strict,expected", [
    ([], False, set(QUOTAS)),
    ([("user", quotas.MATCH_EXACT, "alice")], False, {ALICE, ALICE_APP}),
    ([("user", quotas.MATCH_EXACT, "alice")], True, {ALICE}),
    ([("user", quotas.MATCH_DEFAULT, None)], False, {DEFAULT_USER}),
    ([("client-id", quotas.MATCH_ANY, None)], True, {APP, (("client-id", None),)}),
    ([("client-id", quotas.MATCH_ANY, None)], False, {APP, (("client-id", None),), ALICE_APP}),
    ([("user", quotas.MATCH_ANY, None), ("client-id", quotas.MATCH_EXACT, "app")], False, {ALICE_APP}),
])
def test_describe_matches_components_as_kafka(components, strict, expected):
    error, _, found = quotas.describe(QUOTAS, components, strict)
    assert error == E.NONE and {entity for entity, _ in found} == expected


def test_describe_refuses_duplicate_types_and_an_exact_match_without_a_name():
    assert quotas.describe(QUOTAS, [("user", 2, None), ("user", 1, None)], False)[0] == E.INVALID_REQUEST
    assert quotas.describe(QUOTAS, [("user", quotas.MATCH_EXACT, None)], False)[0] == E.INVALID_REQUEST


def test_a_client_gets_the_most_specific_quota_in_kafkas_order():
    key = "producer_byte_rate"
    assert quotas.resolve(QUOTAS, "alice", "app", key) == 2.0        # /users/alice/clients/app
    assert quotas.resolve(QUOTAS, "alice", "other", key) == 1.0      # /users/alice
    assert quotas.resolve(QUOTAS, "bob", "app", key) == 4.0          # /clients/app
    assert quotas.resolve(QUOTAS, "bob", "other", key) == 5.0        # /clients/<default>
    assert quotas.resolve(QUOTAS, "bob", "other", "consumer_byte_rate") == 3.0   # /users/<default>
    assert quotas.resolve({}, "bob", "other", key) is None


def test_the_rate_is_measured_over_the_window_and_the_excess_is_the_throttle_time():
    window = quotas.RateWindow(samples=11, sample_ms=1000)
    window.record(5_000, 0)
    assert window.rate(0) == 500.0                 # a young window counts as 10 s, as Kafka's Rate
    assert window.throttle_ms(1_000, 0) == 0
    window.record(15_000, 500)   # 20,000 bytes over 10.5 s (10 s and the current sample's 0.5 s, as Kafka's Rate)
    assert window.throttle_ms(1_000, 500) == 9_500  # (1,904.8 - 1,000) B/s / 1,000 B/s x 10.5 s
    assert window.room(1_000, 500) == -9_500        # 10.5 s at 1,000 B/s is 10,500 bytes; 20,000 are in the window
    assert window.window_ms(5_300) == 10_300        # 5 whole samples of 10 and the current one's 0.3 s
    assert window.window_ms(10_700) == 10_700       # no sample missing: the time since the oldest began
    assert window.rate(12_000) == 0.0              # every sample left the window
    assert window.room(1_000, 12_000) == 10_000    # an empty window: a young window's 10 s worth
    throttles = quotas.Throttles("producer_byte_rate", samples=11, sample_ms=1000)
    limit = {(("client-id", None),): {"producer_byte_rate": 200.0}}
    assert throttles.record(limit, "bob", "other", 1_000, 0) == 0      # 100 B/s against 200
    assert throttles.record({}, "bob", "other", 10**9, 0) == 0         # no quota: never counted, never throttled
    assert throttles.record(limit, "bob", "other", 2_000, 0) == 5_000  # 300 B/s: (300 - 200) / 200 * 10 s
    # uncapped, as Kafka's byte-rate quotas: (100,300 - 200) / 200 * 10 s (a cap would let the window empty meanwhile)
    assert throttles.record(limit, "bob", "other", 10**6, 0) == 5_005_000
    capped = quotas.Throttles("request_percentage", samples=11, sample_ms=1000, max_throttle_ms=1000)
    assert capped.record({(("client-id", None),): {"request_percentage": 1.0}}, "bob", "x", 50.0, 0) == 1000


def test_controller_mutations_take_tokens_from_a_bucket_that_starts_full_and_refills_at_the_rate():
    from actors.quotas import MutationQuotas
    quotas = {(("client-id", "admin"),): {"controller_mutation_rate": 2.0}}
    bucket = MutationQuotas(samples=11, sample_ms=1000)
    assert bucket.throttle_ms(quotas, "ANONYMOUS", "admin", 1_000) == 0  # full: 22 partitions
    bucket.record(quotas, "ANONYMOUS", "admin", 10, 1_000)
    bucket.record(quotas, "ANONYMOUS", "admin", 10, 1_000)
    assert bucket.throttle_ms(quotas, "ANONYMOUS", "admin", 1_000) == 0  # 2 left: the next request goes through
    bucket.record(quotas, "ANONYMOUS", "admin", 10, 1_000)
    assert bucket.throttle_ms(quotas, "ANONYMOUS", "admin", 1_000) == 4_000  # 8 below zero, 2 a second
    assert bucket.throttle_ms(quotas, "ANONYMOUS", "admin", 3_000) == 2_000
    assert bucket.throttle_ms(quotas, "ANONYMOUS", "admin", 100_000) == 0  # (refilled, to the burst at most)
    bucket.record(quotas, "ANONYMOUS", "admin", 23, 100_000)
    assert bucket.throttle_ms(quotas, "ANONYMOUS", "admin", 100_000) == 500
    assert bucket.throttle_ms(quotas, "ANONYMOUS", "other", 100_000) == 0  # no quota: never


def test_request_percentage_throttles_at_most_one_window():
    from actors.quotas import Throttles
    quotas = {(("client-id", "busy"),): {"request_percentage": 1.0}}  # 1% of a thread: 10 ms a second
    throttles = Throttles("request_percentage", 11, 1000, max_throttle_ms=1000)
    assert throttles.record(quotas, "ANONYMOUS", "busy", 5.0, 0) == 0  # 50 ms over a 10 s window: 0.5%
    assert throttles.record(quotas, "ANONYMOUS", "busy", 50.0, 10) == 1000  # 5.5%: 45 s of excess, capped


def test_an_address_has_its_own_connection_creation_rate_else_the_default_ips():
    ip = (("ip", "10.0.0.7"),)
    default = (("ip", None),)
    assert quotas.ip_quota({ip: {"connection_creation_rate": 3}, default: {"connection_creation_rate": 9}},
                           "10.0.0.7") == 3
    assert quotas.ip_quota({ip: {"connection_creation_rate": 3}, default: {"connection_creation_rate": 9}},
                           "10.0.0.8") == 9
    assert quotas.ip_quota({ip: {"connection_creation_rate": 3}}, "10.0.0.8") is None
    assert quotas.ip_quota({(("ip", "0:0:0:0:0:0:0:1"),): {"connection_creation_rate": 2}}, "::1") == 2
    # a client id's quotas are not an address's
    assert quotas.ip_quota({(("client-id", None),): {"producer_byte_rate": 5}}, "10.0.0.7") is None


def test_connections_over_an_addresses_rate_are_not_counted_and_wait_at_most_one_window():
    q = {(("ip", "10.0.0.7"),): {"connection_creation_rate": 2}}
    rates = quotas.ConnectionRates(samples=11, sample_ms=1000)
    # a young window is measured over at least 10 s (Kafka's Rate): 20 connections at once are within 2/s
    assert [rates.accept(q, "10.0.0.7", 0) for _ in range(20)] == [0] * 20
    refused = [rates.accept(q, "10.0.0.7", 0) for _ in range(5)]
    assert refused == [500] * 5  # 21 over 10 s is 0.1/s above 2/s: 1/20 of the window; the refused are not counted
    assert rates.accept(q, "10.0.0.8", 0) == 0  # no quota for this address: not counted at all
    assert "10.0.0.8" not in rates.windows
    assert rates.accept(q, "10.0.0.7", 9_000) == 500
    assert rates.accept(q, "10.0.0.7", 10_500) == 0  # 21 over 10.5 s: 2/s
    many = {(("ip", None),): {"connection_creation_rate": 1}}
    assert max(rates.accept(many, "10.0.0.9", 0) for _ in range(100)) == 1000  # at most one window
