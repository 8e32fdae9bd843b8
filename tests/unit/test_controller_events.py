"""The controller's broker events (actors/controller/events.py): numbered, bounded."""
from actors.controller.events import BrokerEvents


def test_numbered_and_read_from_a_number():
    events = BrokerEvents()
    events.add("broker 2 fenced", 1000)
    events.add("broker 2 back", 2000)
    assert [e.text for e in events.after(0)] == ["broker 2 fenced", "broker 2 back"]
    assert [e.text for e in events.after(1)] == ["broker 2 back"]
    assert events.after(2) == [] and events.next_seq == 2


def test_bounded():
    events = BrokerEvents(limit=3)
    for i in range(5):
        events.add(f"e{i}", i)
    assert [e.text for e in events.after(0)] == ["e2", "e3", "e4"]
