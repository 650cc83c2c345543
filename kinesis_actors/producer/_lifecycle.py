"""The producer's lifecycle states: new, opening, open, closing, closed.

A :class:`ProducerState` is a ``str`` whose value is the name the producer's messages have
always used ("producer for 's' is closed; ..."). Written by the
:class:`~._producer.Producer` alone; the put path compares with the module's constants (a
global load, as cheap as the string constant it replaced), by identity.
"""

from __future__ import annotations

import enum

__all__ = ["CLOSED", "CLOSING", "NEW", "OPEN", "OPENING", "ProducerState"]


class ProducerState(enum.StrEnum):
    """Where a producer is in its life; only ``OPEN`` takes records."""

    NEW = "new"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


NEW = ProducerState.NEW
OPENING = ProducerState.OPENING
OPEN = ProducerState.OPEN
CLOSING = ProducerState.CLOSING
CLOSED = ProducerState.CLOSED
