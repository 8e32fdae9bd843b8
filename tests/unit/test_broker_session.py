"""A broker's own view of its controller session (actors/gateway/broker_session.py) and what the
gateway serves while it may be fenced (GatewayContext), on a manual clock: no Ray."""
import uuid

from actors.controller.image import MetadataImage
from actors.controller.core import BrokerInfo, PartitionState, TopicState
from actors.gateway import context as context_module
from actors.gateway.broker_session import BrokerSession
from actors.gateway.context import GatewayContext


def test_unknown_before_the_first_registration():
    session = BrokerSession(9000)
    assert not session.expired(10**9) and not session.check(10**9)


def test_expires_a_session_after_the_send_time_of_the_last_answered_heartbeat():
    session = BrokerSession(9000)
    session.renewed(1000)
    assert not session.check(9999)
    session.renewed(500)  # a late answer to an older heartbeat does not move the session back
    assert session.expires_at_ms() == 10000
    assert session.check(10000) and session.lost
    assert not session.check(10001), "found expired once"


def test_a_heartbeat_answer_renews_the_session_from_the_controllers_last_contact_with_a_majority():
    """The answer says the controller's voter last heard from a majority 800 ms before it answered:
    the session counts from 800 ms before the send time, so it ends no later than a session after
    that contact, when a successor that last heard from the old leader then may fence it."""
    session = BrokerSession(9000)
    session.heartbeat_answered(5000, contact_age_ms=800)
    assert session.expires_at_ms() == 4200 + 9000
    assert session.check(13200) and not session.check(13500)
    session.heartbeat_answered(13000, contact_age_ms=0)  # a controller with one voter: no age
    assert session.expires_at_ms() == 22000


def test_resumes_only_once_the_controller_answered_again():
    session = BrokerSession(3000)
    session.renewed(0)
    assert session.check(3000)
    assert not session.may_resume(3500)
    session.renewed(3400)  # a heartbeat sent at 3400 was answered
    assert session.may_resume(3500)
    assert session.resumed(3500) and not session.lost
    session.renewed(3400)
    assert session.check(6400)
    session.renewed(6500)
    assert not session.resumed(9500), "expired again while fresh metadata was asked for"
    assert session.lost


def _image(broker_id: int, version: int = 1) -> tuple[MetadataImage, uuid.UUID]:
    topic_id = uuid.uuid4()
    topic = TopicState("orders", topic_id, [PartitionState(0, [1, 2], broker_id, 0, [1, 2])], {})
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2)}
    return MetadataImage(version, "c", 1, brokers, {"orders": topic}, {}, {(topic_id, 0): "/tmp/x/sock"}), topic_id


def test_a_gateway_whose_session_ran_out_leads_nothing_and_leaves_itself_out(monkeypatch):
    now = [0]
    monkeypatch.setattr(context_module, "monotonic_ms", lambda: now[0])
    ctx = GatewayContext(1, {}, controller=None, client_for=lambda key, address: ("client", key))
    ctx.session = BrokerSession(3000)
    ctx.session.renewed(0)
    image, topic_id = _image(broker_id=1)
    ctx.set_metadata(image)
    assert ctx.partition(topic_id, 0) == ("client", (topic_id, 0))
    assert not ctx.fenced()

    now[0] = 3000  # no heartbeat answered for broker.session.timeout.ms: refused at once, before any timer
    assert ctx.fenced() and ctx.partition(topic_id, 0) is None
    assert ctx.session.check(now[0])
    ctx.set_metadata(ctx.published)
    assert sorted(ctx.metadata.brokers) == [2], "advertised as the controller would after fencing it"
    assert ctx.partition(topic_id, 0) is None
    assert ctx.partition(topic_id, 0, follower=True) is not None, "followers still fetch"

    now[0] = 5000
    ctx.session.renewed(4900)
    assert ctx.partition(topic_id, 0) is None, "not before fresh metadata"
    fresh, _ = _image(broker_id=2, version=2)  # meanwhile the controller moved the partition
    assert ctx.session.resumed(now[0])
    ctx.set_metadata(fresh)
    assert sorted(ctx.metadata.brokers) == [1, 2] and not ctx.fenced()
    assert ctx.partition(next(iter(fresh.partition_listeners))[0], 0) is None, "broker 2 leads it now"
