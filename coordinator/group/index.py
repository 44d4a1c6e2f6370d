"""The coordinator's groups, found by id, by state and by "has timers" without scanning the rest.

ListGroups with a states filter reads the groups in those states; the timer re-arm after every
write (``next_deadline_ms``) reads only the groups that may hold a deadline (members, pending
joins, rebalance timers), not the thousands of groups that only hold offsets.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, ValuesView

from coordinator.group.state import ClassicGroup, GroupState
from coordinator.hashing import coordinator_partition


@functools.lru_cache(maxsize=1 << 16)
def cached_partition(group_id: str, num_partitions: int) -> int:
    """``coordinator_partition`` (a Java String.hashCode in Python) computed once per group id."""
    return coordinator_partition(group_id, num_partitions)


class GroupIndex(Mapping[str, ClassicGroup]):
    def __init__(self) -> None:
        self._groups: dict[str, ClassicGroup] = {}
        self._by_state: dict[GroupState, dict[str, ClassicGroup]] = {s: {} for s in GroupState}
        self._timed: set[str] = set()  # groups that may hold a deadline

    # ------------------------------------------------------------ Mapping

    def __getitem__(self, group_id: str) -> ClassicGroup:
        return self._groups[group_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def values(self) -> ValuesView[ClassicGroup]:
        return self._groups.values()  # the dict's own view: no __getitem__ per group

    # ------------------------------------------------------------ changes

    def add(self, group: ClassicGroup) -> ClassicGroup:
        """Insert or replace ``group`` (its id's previous group leaves every index)."""
        self.pop(group.group_id)
        self._groups[group.group_id] = group
        self._by_state[group.state][group.group_id] = group
        group.on_transition = self._moved
        if group.members:
            self._timed.add(group.group_id)
        return group

    def pop(self, group_id: str) -> ClassicGroup | None:
        group = self._groups.pop(group_id, None)
        if group is not None:
            self._by_state[group.state].pop(group_id, None)
            self._timed.discard(group_id)
            group.on_transition = None
        return group

    def _moved(self, group: ClassicGroup, previous: GroupState) -> None:
        self._by_state[previous].pop(group.group_id, None)
        self._by_state[group.state][group.group_id] = group

    def may_have_deadlines(self, group_id: str) -> None:
        """Something touched the group's members or rebalance: its timers count again."""
        if group_id in self._groups:
            self._timed.add(group_id)

    def no_deadlines(self, group_id: str) -> None:
        self._timed.discard(group_id)

    # ------------------------------------------------------------ queries

    def in_states(self, states: Iterable[GroupState]) -> Iterator[ClassicGroup]:
        for state in states:
            yield from list(self._by_state[state].values())

    def timed(self) -> list[ClassicGroup]:
        return [self._groups[g] for g in self._timed]
