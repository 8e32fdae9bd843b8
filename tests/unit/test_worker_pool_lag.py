"""The lag a worker pool scales on (cluster/workers/lag.py): DescribeShareGroupOffsets' lag where
the broker fills it, an end-offset estimate where it answers -1 (a v0 broker), and None while the
group has no state, so the pool holds its size rather than scaling on a guess."""
from protocol.errors import ErrorCode
from protocol.messages import DescribeShareGroupOffsetsResponse as R

from cluster.workers.lag import ShareGroupLag


def partition(index, start_offset, lag, error_code=0):
    return R.DescribeShareGroupOffsetsResponsePartition(partition_index=index, start_offset=start_offset,
                                                         leader_epoch=0, lag=lag, error_code=error_code)


class FakeCoordinator:
    def __init__(self, group):
        self.group = group

    def send(self, request):
        return R(throttle_time_ms=0, groups=[self.group])


def read(group, estimate=None):
    lag = ShareGroupLag("127.0.0.1:9092", "g", ["orders"])
    asked = []
    lag._estimate = lambda start_offsets: asked.append(start_offsets) or (estimate or 0)
    return lag._read(FakeCoordinator(group)), lag.estimated, asked


def group(*topics, error_code=0):
    return R.DescribeShareGroupOffsetsResponseGroup(group_id="g", error_code=error_code, topics=[
        R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, partitions=parts) for name, parts in topics])


def test_the_lag_is_the_sum_over_the_pools_topics_as_the_broker_reports_it():
    value, estimated, asked = read(group(("orders", [partition(0, 10, 5), partition(1, 20, 7)]),
                                                     ("other", [partition(0, 0, 1000)])))
    assert value == 12 and not estimated and asked == []


def test_a_partition_without_lag_is_estimated_from_its_start_and_end_offsets():
    value, estimated, asked = read(group(("orders", [partition(0, 10, 5), partition(1, 20, -1)])),
                                   estimate=30)
    assert value == 35 and estimated
    assert asked == [{"orders": {1: 20}}], "ListOffsets only for the partitions the broker left at -1"


def test_no_state_yet_or_no_group_is_unknown_not_zero():
    assert read(group(("orders", [partition(0, -1, -1)])))[0] is None
    assert read(group(error_code=ErrorCode.GROUP_ID_NOT_FOUND))[0] is None
    assert read(group())[0] is None


def test_a_partition_in_error_is_left_out():
    value, _, _ = read(group(("orders", [partition(0, 10, 5),
                                                     partition(1, 0, 99, ErrorCode.NOT_LEADER_OR_FOLLOWER)])))
    assert value == 5
