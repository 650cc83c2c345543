"""The observable state of a supervision tree, as plain frozen data.

Snapshots are built synchronously from the live objects, hold no references to them, and turn
into JSON-ready dicts with :meth:`SupervisorSnapshot.to_dict`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

from ._letters import MailboxStats


@dataclass(frozen=True)
class ChildSnapshot:
    """One supervised actor."""

    name: str
    path: str
    state: str
    """``starting``, ``running``, ``restarting``, ``stopping`` or ``stopped``."""
    restart: str
    restarts: int
    """How many times this child was restarted."""
    incarnation: int
    last_failure: str | None
    """``repr`` of the last exception that took the child down, if any."""
    mailbox: MailboxStats | None
    """None for a source actor, which has no mailbox."""
    subtree: SupervisorSnapshot | None = None
    """The nested supervisor's snapshot, for a child that runs one."""


@dataclass(frozen=True)
class SupervisorSnapshot:
    """A supervisor and its children, in start order."""

    name: str
    strategy: str
    state: str
    """``new``, ``running``, ``stopping``, ``stopped`` or ``failed``: a supervisor state's value."""
    restarts_in_window: int
    """With an intensity per child: the most any one child has (the one nearest its limit)."""
    max_restarts: int
    period: float
    failure: str | None
    children: tuple[ChildSnapshot, ...]
    intensity_scope: str = "supervisor"
    """``supervisor`` (one budget for all the children) or ``child`` (one each)."""

    def to_dict(self) -> dict[str, Any]:
        """Nested dicts, lists and scalars only: ready for JSON or a metrics exporter."""
        return cast(dict[str, Any], _plain(dataclasses.asdict(self)))

    def child(self, name: str) -> ChildSnapshot:
        for snapshot in self.children:
            if snapshot.name == name:
                return snapshot
        raise KeyError(name)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
