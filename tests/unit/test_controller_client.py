"""Control calls with a timeout and retries (actors/controller_client.py), against a stand-in for
a Ray actor handle whose answers hang, fail or come late: no Ray."""
import asyncio

import pytest
import ray

from actors import controller_client
from actors.controller_client import ControllerUnreachable, call


class Method:
    def __init__(self, answers):
        self.answers = list(answers)  # per attempt: a value, an exception, or "hang"
        self.attempts = 0

    def remote(self, *args):
        self.attempts += 1
        answer = self.answers.pop(0) if self.answers else "hang"
        return self._answer(answer, args)

    async def _answer(self, answer, args):
        if answer == "hang":
            await asyncio.sleep(3600)
        if isinstance(answer, Exception):
            raise answer
        return (answer, args)


class Handle:
    def __init__(self, **methods):
        self.__dict__.update(methods)


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(controller_client, "RETRY_BACKOFF_S", 0.01)


def test_an_answer_in_time():
    handle = Handle(heartbeat=Method([0]))
    assert asyncio.run(call(handle, "heartbeat", 1, 7, timeout_s=1)) == (0, (1, 7))


def test_a_hung_call_times_out_instead_of_waiting_for_tcp():
    handle = Handle(heartbeat=Method(["hang"]))
    with pytest.raises(ControllerUnreachable, match="did not answer heartbeat within 0.05 s"):
        asyncio.run(call(handle, "heartbeat", 1, 7, timeout_s=0.05))
    assert handle.heartbeat.attempts == 1


def test_timeouts_and_an_unavailable_controller_are_retried_within_the_window():
    unavailable = ray.exceptions.ActorUnavailableError("restarting", None)
    handle = Handle(create_topic=Method(["hang", unavailable, "created"]))
    assert asyncio.run(call(handle, "create_topic", "t", timeout_s=0.05, retry_for_s=5))[0] == "created"
    assert handle.create_topic.attempts == 3


def test_gives_up_when_the_window_is_over():
    handle = Handle(create_topic=Method([]))
    with pytest.raises(ControllerUnreachable):
        asyncio.run(call(handle, "create_topic", "t", timeout_s=0.05, retry_for_s=0.2))
    assert 2 <= handle.create_topic.attempts <= 5


def test_a_long_poll_waits_its_own_wait_plus_the_slack(monkeypatch):
    monkeypatch.setattr(controller_client, "METADATA_POLL_SLACK_S", 0.05)
    handle = Handle(wait_for_metadata=Method(["hang"]))
    with pytest.raises(ControllerUnreachable):
        asyncio.run(controller_client.wait_for_metadata(handle, 3, 0.05))


def test_an_active_controller_travels_without_actor_handles_and_calls_with_the_ones_its_process_knows():
    """Ray deserializes an actor handle on the receiving actor's event loop and, for an actor class
    that process has not loaded, asks Ray's GCS there: a shard that got a new controller's handle
    while the Ray head was cut off froze for the whole cut. So only the voters travel; the receiver
    calls with the handles known in its process (or looks them up by name, off its loop)."""
    import pickle
    standby = controller_client.NotController("standing by")
    known = Handle(describe=Method(["from-2"]))
    sender = controller_client.ActiveController((1, 2, 3), {1: Handle(describe=Method([standby])), 2: known,
                                                            3: Handle(describe=Method([standby]))})
    state = sender.__getstate__()
    assert state == {"voters": (1, 2, 3)}
    received = pickle.loads(pickle.dumps(sender))
    assert received.voters == (1, 2, 3) and received._handle(2) is known
    assert asyncio.run(received._call("describe", ())) == ("from-2", ())
