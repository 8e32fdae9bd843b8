"""Which gateway failures the controller reports as "cannot listen" (actors/controller/actor.listen_failure):
a listener's own errors, not a node cut off or declared dead."""
import errno

import ray

from actors.controller.actor import listen_failure
from actors.controller_client import ControllerUnreachable


class _TaskError(Exception):
    """Stands in for Ray's RayTaskError: the gateway's own exception is its `cause`."""

    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause


def test_a_port_taken_is_a_listen_failure():
    assert listen_failure(_TaskError(OSError(errno.EADDRINUSE, "address already in use")))
    assert listen_failure(OSError(errno.EADDRNOTAVAIL, "cannot assign requested address"))


def test_an_unreachable_or_dead_node_is_not():
    assert not listen_failure(ray.exceptions.ActorUnavailableError("keepalive watchdog timeout", None))
    assert not listen_failure(_TaskError(ControllerUnreachable("the controller did not answer")))
    assert not listen_failure(_TaskError(ConnectionResetError("reset by peer")))
    assert not listen_failure(ValueError("its Ray node was declared dead"))
