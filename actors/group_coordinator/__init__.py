"""The group coordinator: share groups (KIP-932) in a pure core; the Ray shell lives in `actor.py`."""
from actors.group_coordinator.core import (
    SHARE_GROUP_CONFIG_DEFAULTS,
    DescribedGroup,
    DescribedMember,
    GroupCoordinatorShard,
    GroupState,
    HeartbeatResult,
    ShareGroupConfig,
    ShareGroupMetrics,
    TopicsView,
)

__all__ = ["SHARE_GROUP_CONFIG_DEFAULTS", "DescribedGroup", "DescribedMember", "GroupCoordinatorShard", "GroupState",
           "HeartbeatResult", "ShareGroupConfig", "ShareGroupMetrics", "TopicsView"]
