"""A stream as the user names it: by name, or by ARN for a stream of another account. Sans-IO.

Every Kinesis operation on a stream takes ``StreamName`` or ``StreamARN``; a caller in another
account (the stream shared with a resource-based policy) must use the ARN. So everywhere the
library takes a stream, it takes either, and :class:`StreamRef` tells them apart once, before
any call:

* a name, 1-128 of ``[a-zA-Z0-9_.-]`` (the service's rule), is sent as ``StreamName``;
* ``arn:<partition>:kinesis:<region>:<12-digit account>:stream/<name>`` is sent as
  ``StreamARN``. Its region must be the client's: the service answers a stream of another
  region with ResourceNotFound, which would read as "no such stream".

Anything else is a :class:`~kinesis_actors.errors.ConfigError` naming the option: a malformed
ARN, the ARN of another service, and a consumer's ARN (``…:stream/<name>/consumer/<c>:<ts>``,
which only ``ConsumerConfig.consumer_arns`` takes).

Inside the library a stream has one identity whichever way it was named: its **name**. Record
batches, positions documents, Spark offsets and metrics say ``orders`` for
``arn:aws:kinesis:eu-west-1:111122223333:stream/orders`` too, so a checkpoint written by name
resumes by ARN and back. (The positions document also carries the ARN and creation time, which
tell a stream from another of the same name, ``consumer/_identity.py``.)

A name never contains ``:``, so a validated reference that starts with ``arn:`` is an ARN:
:func:`stream_params` relies on that to pick the parameter of a string already checked by
:meth:`StreamRef.parse`, without parsing it again on a hot path (PutRecords).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._validate import STREAM_NAME_PATTERN
from ..errors import ConfigError

__all__ = ["StreamRef", "stream_params"]

_ARN = re.compile(
    r"arn:(?P<partition>aws(?:-[a-z]+)*):kinesis:(?P<region>[a-z0-9]+(?:-[a-z0-9]+)*):"
    r"(?P<account>\d{12}):stream/(?P<name>[a-zA-Z0-9_.-]{1,128})"
)
_CONSUMER = re.compile(r"arn:[^:]*:kinesis:[^:]*:[^:]*:stream/[^/]+/consumer/.*")
_SHAPE = "arn:<partition>:kinesis:<region>:<12-digit account>:stream/<name>"


@dataclass(frozen=True, slots=True)
class StreamRef:
    """A stream, by name or by ARN: which parameter the calls take, and its identity.

    ``name`` is the stream's name in either case (the library's key for it); ``arn`` is the
    ARN it was given by, or None. ``str(ref)`` is what the user gave.
    """

    name: str
    arn: str | None = None

    @classmethod
    def parse(cls, value: Any, *, option: str = "stream", region: str | None = None) -> StreamRef:
        """Check ``value``, a stream name or stream ARN, before any call.

        A :class:`~kinesis_actors.errors.ConfigError` naming ``option`` for anything else, and
        for an ARN whose region is not ``region`` (the client's), when given.
        """
        if not isinstance(value, str) or not value.startswith("arn:"):
            if not isinstance(value, str) or not STREAM_NAME_PATTERN.fullmatch(value):
                raise ConfigError(
                    f"{option} must be a stream name of 1 to 128 characters from a-z, A-Z, "
                    f"0-9, '_', '.' and '-', or a stream ARN ({_SHAPE}), got {value!r:.200}"
                )
            return cls(value)
        found = _ARN.fullmatch(value)
        if found is None:
            raise ConfigError(f"{option}: {_arn_problem(value)}, got {value!r:.300}")
        if region is not None and found["region"] != region:
            raise ConfigError(
                f"{option}: the stream {value} is in region {found['region']}, but the client "
                f"is for {region} (a client calls one region's endpoint): set the region to "
                f"{found['region']} (KinesisClient(region=...), --region, option region)"
            )
        return cls(found["name"], value)

    @property
    def region(self) -> str | None:
        """The region of an ARN (None for a name: the client's)."""
        return None if self.arn is None else self.arn.split(":", 4)[3]

    @property
    def account(self) -> str | None:
        """The account that owns the stream, for an ARN (None for a name: the caller's)."""
        return None if self.arn is None else self.arn.split(":", 5)[4]

    def params(self) -> dict[str, str]:
        """The stream's parameter of a call: ``{"StreamARN": arn}`` or ``{"StreamName": name}``."""
        return {"StreamARN": self.arn} if self.arn is not None else {"StreamName": self.name}

    def __str__(self) -> str:
        return self.arn if self.arn is not None else self.name


def _arn_problem(value: str) -> str:
    parts = value.split(":", 5)
    if len(parts) > 2 and parts[2] != "kinesis":
        return (
            f"the ARN of another service ({parts[2] or 'none'!r}), not of a Kinesis stream "
            f"({_SHAPE})"
        )
    if _CONSUMER.fullmatch(value):
        return (
            "the ARN of a stream's consumer, not of a stream: give the stream's ARN (the part "
            "before /consumer/) or its name; consumer ARNs go to ConsumerConfig.consumer_arns"
        )
    return f"not a Kinesis stream ARN ({_SHAPE}, a name of 1 to 128 of a-z, A-Z, 0-9, _ . -)"


def stream_params(stream: str) -> dict[str, str]:
    """The parameter for a stream already checked by :meth:`StreamRef.parse` (its name or ARN
    as given): ``{"StreamARN": stream}`` for an ARN, ``{"StreamName": stream}`` otherwise."""
    return {"StreamARN" if stream.startswith("arn:") else "StreamName": stream}
