"""ShareWorkerPool's options: a mistake is refused when the pool is made, saying what to pass
(nothing starts: no Ray needed)."""
import pytest

from cluster.workers.pool import ShareWorkerPool


def make(**overrides):
    options = dict(bootstrap_servers="127.0.0.1:9092", group="g", topics=["t"], handler=lambda record: None)
    return ShareWorkerPool(**(options | overrides))


@pytest.mark.parametrize("bad, error, says", [
    (dict(topics=[]), ValueError, "at least one topic"),
    (dict(handler="not a function"), TypeError, "not callable"),
    (dict(poison=ValueError), TypeError, "tuple of exception types"),
    (dict(poison=(ValueError, "KeyError")), TypeError, "tuple of exception types"),
    (dict(max_workers=0), ValueError, "max_workers"),
    (dict(scale_down_windw_s=5), TypeError, "unknown ShareWorkerPool options"),
    (dict(max_poll_records=0), ValueError, "max_poll_records"),
])
def test_bad_options_say_what_to_pass(bad, error, says):
    with pytest.raises(error, match=says):
        make(**bad)


def test_one_topic_may_be_named_alone_and_policy_options_pass_through():
    pool = make(topics="orders", scale_down_window_s=5.0, lag_target_s=2.0)
    assert pool.topics == ["orders"]
    assert pool.config.scale_down_window_s == 5.0 and pool.config.lag_target_s == 2.0
