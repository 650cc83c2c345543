"""Small checks shared by every configuration object.

Each raises :class:`~kinesis_actors.errors.ConfigError` naming the option and what it accepts,
so that a bad configuration fails at construction, before any network call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import Any

from .errors import ConfigError

__all__ = [
    "SEQUENCE_NUMBER_MAX_DIGITS",
    "STREAM_NAME_PATTERN",
    "check_choice",
    "check_non_negative",
    "check_positive",
    "check_sequence_number",
    "check_type",
]

#: The service's rule for stream names (and consumer names): 1-128 of these characters.
STREAM_NAME_PATTERN = re.compile(r"[a-zA-Z0-9_.-]{1,128}")

#: Sequence numbers are decimal digits, at most 129 of them (the service model's pattern).
SEQUENCE_NUMBER_MAX_DIGITS = 129
_SEQUENCE_NUMBER = re.compile(r"0|[1-9][0-9]{0,128}")


def _is_number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


def check_positive(option: str, value: Any, *, integer: bool = False) -> None:
    """``value`` must be a finite number (an int if ``integer``) greater than zero."""
    if not _is_number(value, integer) or value <= 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(f"{option} must be {kind}, got {value!r}")


def check_non_negative(option: str, value: Any, *, integer: bool = False) -> None:
    """``value`` must be a finite number (an int if ``integer``) of at least zero."""
    if not _is_number(value, integer) or value < 0:
        kind = "a non-negative integer" if integer else "a non-negative number"
        raise ConfigError(f"{option} must be {kind}, got {value!r}")


def check_choice(option: str, value: Any, choices: Collection[str]) -> None:
    """``value`` must be one of ``choices``."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{option} must be one of {allowed}, got {value!r}")


def check_type(option: str, value: Any, expected: type | tuple[type, ...], what: str) -> None:
    """``value`` must be an instance of ``expected``; ``what`` describes it for the message."""
    if not isinstance(value, expected):
        raise ConfigError(f"{option} must be {what}, got {value!r}")


def check_sequence_number(option: str, value: Any) -> None:
    """``value`` must look like a sequence number: decimal digits, at most 129 of them."""
    if not isinstance(value, str) or not _SEQUENCE_NUMBER.fullmatch(value):
        raise ConfigError(
            f"{option} must be a sequence number (a string of 1 to "
            f"{SEQUENCE_NUMBER_MAX_DIGITS} decimal digits), got {value!r:.80}"
        )
