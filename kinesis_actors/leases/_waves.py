"""A take round's writes, some at a time: a dead worker's 250 leases are about 16 waves of
writes, not 250 one after another, and the table sees a bounded burst.

:func:`in_waves` runs an action on every item, a bounded number at once, and ends as a
sequential loop would on the table's first error: the other actions are cancelled and that
error is raised once (the most serious first), never as an exception group, for the take loop
to log or to stop on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

from ..errors import KinesisError

__all__ = ["in_waves"]

_T = TypeVar("_T")


async def in_waves(
    items: Sequence[_T],
    action: Callable[[_T], Awaitable[None]],
    *,
    at_once: int,
    fatal: tuple[type[KinesisError], ...],
) -> None:
    """``action`` on every item, ``at_once`` at a time. The first :class:`KinesisError`
    cancels the rest and is raised once; of several, one of the ``fatal`` kinds first."""
    if not items:
        return
    if len(items) == 1:
        await action(items[0])
        return
    limit = anyio.CapacityLimiter(at_once)
    failed: list[KinesisError] = []

    async def one(item: _T, scope: anyio.CancelScope) -> None:
        async with limit:
            try:
                await action(item)
            except KinesisError as error:
                failed.append(error)
                scope.cancel()

    async with anyio.create_task_group() as group:
        for item in items:
            group.start_soon(one, item, group.cancel_scope)
    if failed:
        serious = [error for error in failed if isinstance(error, fatal)]
        raise (serious or failed)[0]
