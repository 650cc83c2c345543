"""Old names kept for one release: each still works and says which name replaced it.

The library's statistics have one shape, trio's: a ``statistics()`` method returning a frozen
snapshot. The names it replaced (``stats``, ``snapshot()``, ``Consumer.metrics``) call
:func:`renamed`, which warns with :class:`DeprecationWarning` naming the new one, at the
caller's line.
"""

from __future__ import annotations

import warnings

__all__ = ["renamed"]


def renamed(old: str, new: str) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (to be removed next release).

    Called from the old name's body, so the warning points at the caller of that body.
    """
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=3,
    )
