"""Taking back a command's changes to one group: the group types that keep their groups in `_groups`
(group id -> the group) copy a group before a command's first record touches it and put the copy back
when the command's records could not be written (Groups.apply / Groups.revert)."""
from __future__ import annotations

import copy
from typing import Any


class GroupSnapshots:
    _groups: dict[str, Any]

    def snapshot(self, group_id: str):
        """A copy of everything this holds for `group_id`, for `restore` (a command's changes taken back)."""
        return copy.deepcopy(self._groups.get(group_id))

    def restore(self, group_id: str, snapshot) -> None:
        if snapshot is None:
            self._groups.pop(group_id, None)
        else:
            self._groups[group_id] = snapshot
