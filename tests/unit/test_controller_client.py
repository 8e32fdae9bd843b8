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
    # each test starts with a process that knows no controller (handles and the active one are per process)
    monkeypatch.setattr(controller_client, "_known_controllers", {})
    monkeypatch.setattr(controller_client, "_known_active", {})


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


def test_a_call_to_a_cut_off_controller_moves_to_one_elected_while_it_waits(monkeypatch):
    """The active controller's host is cut off: a call to it hangs, and at the first probe the
    election is still on (no controller says it is active). The call must move to the controller
    that becomes active later, not wait on the cut-off one until its timeout."""
    monkeypatch.setattr(controller_client, "PROBE_AFTER_S", 0.05)
    monkeypatch.setattr(controller_client, "PROBE_TIMEOUT_S", 0.05)
    elected = {"at": None}

    class IsActive:
        def __init__(self, voter):
            self.voter = voter

        def remote(self):
            async def answer():
                if self.voter == 1:
                    await asyncio.sleep(3600)  # cut off
                return elected["at"] is not None and asyncio.get_running_loop().time() >= elected["at"] \
                    and self.voter == 3
            return answer()

    cut_off = Handle(heartbeat=Method(["hang"]), is_active=IsActive(1))
    standby = Handle(heartbeat=Method([controller_client.NotController("standing by")] * 10), is_active=IsActive(2))
    new_active = Handle(heartbeat=Method(["from-3", "from-3"]), is_active=IsActive(3))
    controller = controller_client.ActiveController((1, 2, 3), {1: cut_off, 2: standby, 3: new_active})
    controller._active = 1

    async def run():
        elected["at"] = asyncio.get_running_loop().time() + 0.3  # after a few probes found no one
        return await asyncio.wait_for(controller._call("heartbeat", (1,)), 2.0)

    assert asyncio.run(run()) == ("from-3", (1,))
    assert controller._active == 3 and new_active.heartbeat.attempts == 1 and cut_off.heartbeat.attempts == 1
    # another ActiveController of this process (another replica of the shard) asks the new one first
    other = controller_client.ActiveController((1, 2, 3))
    assert asyncio.run(other._call("heartbeat", (2,))) == ("from-3", (2,)) and cut_off.heartbeat.attempts == 1
