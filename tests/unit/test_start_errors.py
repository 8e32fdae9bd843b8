"""What `kray start` says when Ray can't be reached or a broker can't listen (cluster/start_errors.py):
the cause as it is, and the fix."""
from cluster.start_errors import ProblemLog, cannot_listen, ray_port_closed, ray_unreachable

BIND = "[Errno 98] error while attempting to bind on address ('0.0.0.0', 9092): address already in use"


def failed_connect() -> ConnectionError:
    try:
        try:
            raise RuntimeError("GCS did not answer")
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 198.18.0.1:6379") from inner
    except ConnectionError as e:
        return e


def test_a_ray_connection_failure_is_reported_as_that_with_the_token_fix():
    text = ray_unreachable("198.18.0.1:6379", failed_connect(), {}, home_token=False)
    assert text.startswith("cannot reach the Ray cluster at 198.18.0.1:6379: Failed to connect")
    assert "RAY_AUTH_MODE=token kray start --address 198.18.0.1:6379" in text
    assert "copy the head's ~/.ray/auth_token" in text
    assert "listen" not in text and "--port" not in text


def test_when_ray_said_the_token_is_missing_the_message_is_definite_and_quotes_it_once():
    said = ["gcs_client.cc:210: Failed to get cluster ID from GCS server: Unauthenticated: RPC error: "
            "InvalidAuthToken: Authentication token is missing or incorrect"]
    text = ray_unreachable("h:6379", failed_connect(), {}, home_token=False, ray_said=said)
    assert "the cluster uses token authentication and refused this process" in text
    assert text.count("InvalidAuthToken") == 1
    wrong = ray_unreachable("h:6379", failed_connect(), {"RAY_AUTH_MODE": "token"}, home_token=True, ray_said=said)
    assert "refused this machine's token" in wrong


def test_with_token_mode_but_no_token_it_says_to_copy_the_heads():
    text = ray_unreachable("h:6379", failed_connect(), {"RAY_AUTH_MODE": "token"}, home_token=False)
    assert "has no token" in text and "RAY_AUTH_TOKEN" in text
    ok = ray_unreachable("h:6379", failed_connect(), {"RAY_AUTH_MODE": "token"}, home_token=True)
    assert "RAY_AUTH_MODE=token kray" not in ok and "ray status --address h:6379" in ok


def test_auto_without_a_local_ray_says_to_start_one_or_name_the_head():
    e = ConnectionError("Could not find any running Ray instance. Please specify the one to connect to")
    assert "ray start --head" in ray_unreachable("auto", e, {}, home_token=False)


def test_a_port_in_use_says_where_and_what_to_do():
    on_cluster = cannot_listen(3, "198.18.0.3", BIND)
    assert on_cluster.startswith("broker 3 (Ray node 198.18.0.3) cannot listen: [Errno 98]")
    assert "port 9092" in on_cluster and "kray-port=N" in on_cluster and "retries" in on_cluster
    assert "--port" in cannot_listen(0, "127.0.0.1", BIND, own_ray=True)
    assert "retries" not in cannot_listen(3, "198.18.0.3", BIND, retrying=False)  # kray start gave up
    assert "above 1023" in cannot_listen(1, None, "[Errno 13] error while attempting to bind on address "
                                                  "('0.0.0.0', 92): permission denied")


def test_each_failure_is_said_once():
    said = ProblemLog()
    assert len(said.new_lines({3: BIND}, {3: "198.18.0.3"})) == 1
    assert said.new_lines({3: BIND}, {3: "198.18.0.3"}) == []
    assert len(said.new_lines({3: BIND, 2: BIND}, {})) == 1


def test_a_closed_head_port_says_to_start_ray_there():
    text = ray_port_closed("10.0.0.1:6379", ConnectionRefusedError(111, "Connection refused"))
    assert text.startswith("cannot reach the Ray cluster at 10.0.0.1:6379: [Errno 111] Connection refused")
    assert "ray start --head" in text


def test_a_ray_that_does_not_come_up_on_a_busy_machine_is_said_with_what_to_do(monkeypatch):
    """Ray waits a fixed 30 s for a new node's raylet to register; on an overloaded machine `kray start`'s own
    ray.init fails so ("The current node timed out during startup ..."). kray start says it, with the load, and
    what to do, instead of Ray's traceback (seen in CI)."""
    import pytest
    import cluster.local as local
    from cluster.start_errors import RayDidNotStart

    attempts = []

    def ray_times_out(address):
        attempts.append(address)
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(local, "_init_ray", ray_times_out)
    monkeypatch.setattr(local.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(local, "_broker_priority", lambda: None)  # (it would set RAY_worker_niceness here)
    broker = local.LocalBroker({"log.dirs": "/nonexistent-kray-test"}, trim_ray=False)
    with pytest.raises(RayDidNotStart) as raised:
        broker.start()
    said = str(raised.value)
    assert "did not start in time, 3 times" in said and "load average" in said and "Stop what else runs" in said
    assert attempts == ["local"] * 3  # Ray's start tried again (cluster/ray_node_start.py) before giving up

    def other_failure(address):
        raise ValueError("something else")

    monkeypatch.setattr(local, "_init_ray", other_failure)
    with pytest.raises(ValueError):  # (any other failure of Ray's is not renamed)
        local.LocalBroker({"log.dirs": "/nonexistent-kray-test"}, trim_ray=False).start()
