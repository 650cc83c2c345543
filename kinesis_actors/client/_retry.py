"""Retry policy: which failures are worth another attempt, and how long to wait first.

Sans-IO: the policy computes delays from an injectable random source and never sleeps. The
client's I/O loop asks :meth:`RetryPolicy.next_delay` after each failure and sleeps itself.

The settings follow FLIP-128's option table (Flink's Kinesis connector): per operation a
maximum number of retries, a base delay, a maximum delay and an exponential constant. The
delay before retry ``n`` (0-based) is drawn with *full jitter* from
``[0, min(max, base * constant**n)]``, which spreads a crowd of clients that failed together
instead of letting them retry in lockstep.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .. import errors
from .._validate import check_non_negative, check_positive

__all__ = [
    "DEFAULT_RETRY_SETTINGS",
    "DYNAMODB_RETRY_SETTINGS",
    "RetryPolicy",
    "RetrySettings",
    "is_retryable",
]


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """How one operation is retried.

    ``max_retries`` counts retries after the first attempt (0 means "try once"). Delays are
    in seconds.
    """

    max_retries: int = 10
    base: float = 0.3
    max: float = 5.0
    exponential_constant: float = 1.5

    def __post_init__(self) -> None:
        check_non_negative("RetrySettings.max_retries", self.max_retries, integer=True)
        check_positive("RetrySettings.base", self.base)
        check_positive("RetrySettings.max", self.max)
        if self.max < self.base:
            raise errors.ConfigError(
                f"RetrySettings.max ({self.max}) must be at least RetrySettings.base ({self.base})"
            )
        if self.exponential_constant < 1.0:
            raise errors.ConfigError(
                "RetrySettings.exponential_constant must be >= 1.0, "
                f"got {self.exponential_constant!r}"
            )

    def ceiling(self, retry: int) -> float:
        """The upper bound of the jittered delay before retry number ``retry`` (0-based)."""
        # Cap the exponent so that a large retry count cannot overflow a float.
        return min(self.max, self.base * self.exponential_constant ** min(retry, 64))


def _s(max_retries: int, base_ms: int, max_ms: int) -> RetrySettings:
    return RetrySettings(max_retries, base_ms / 1000, max_ms / 1000, 1.5)


#: FLIP-128 defaults per operation; anything not listed uses ``RetrySettings()``.
DEFAULT_RETRY_SETTINGS: Mapping[str, RetrySettings] = {
    "DescribeStream": _s(50, 2000, 5000),
    "DescribeStreamSummary": _s(50, 2000, 5000),
    "ListShards": _s(10, 1000, 5000),
    "DescribeStreamConsumer": _s(50, 2000, 5000),
    "RegisterStreamConsumer": _s(10, 500, 2000),
    "DeregisterStreamConsumer": _s(10, 500, 2000),
    "SubscribeToShard": _s(10, 1000, 2000),
    "GetRecords": _s(3, 300, 1000),
    "GetShardIterator": _s(3, 300, 1000),
}


#: DynamoDB's item operations: many quick retries, as the AWS SDKs do for DynamoDB (their
#: base delay is 25 ms against 100 ms for other services), so that a lease renewal that meets
#: a throttle or a reset connection still lands well inside a failover time of seconds (the
#: ceilings double from 25 ms and cap at 1 s: at most 3.6 s over the 8 retries). Table
#: operations (CreateTable, DescribeTable, ...) use the policy's ``default``.
_ITEM_RETRIES = RetrySettings(8, 0.025, 1.0, 2.0)
DYNAMODB_RETRY_SETTINGS: Mapping[str, RetrySettings] = dict.fromkeys(
    (
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    ),
    _ITEM_RETRIES,
)

#: The defaults per service, by the service's signing name.
_SERVICE_DEFAULTS: Mapping[str, Mapping[str, RetrySettings]] = {
    "kinesis": DEFAULT_RETRY_SETTINGS,
    "dynamodb": DYNAMODB_RETRY_SETTINGS,
}


def is_retryable(error: BaseException) -> bool:
    """Whether another attempt of the same request could succeed.

    Throttling, service-side failures (5xx, InternalFailure, a 2xx reply that cannot be
    believed) and transport failures (a connection refused or reset, a timeout) are
    retryable; everything else is not: bad input, missing resources, access denied or a bad
    signature, expired iterators (which need a *new* request), and a server certificate that
    failed verification (another attempt meets the same certificate).
    """
    if isinstance(error, errors.CertificateError):
        return False
    return isinstance(error, errors.ThrottlingError | errors.ServiceError | errors.TransportError)


@dataclass(slots=True)
class RetryPolicy:
    """Per-operation retry settings plus the random source for jitter.

    ``overrides`` replace the defaults for the operations they name, in whichever service's
    client uses the policy; ``default`` applies to operations named nowhere.
    """

    overrides: Mapping[str, RetrySettings] = field(default_factory=dict)
    default: RetrySettings = field(default_factory=RetrySettings)
    random: Callable[[], float] = random.random

    def __post_init__(self) -> None:
        if not isinstance(self.default, RetrySettings):
            raise errors.ConfigError(
                f"RetryPolicy.default must be a RetrySettings, got {self.default!r}"
            )
        for operation, settings in self.overrides.items():
            if not isinstance(settings, RetrySettings):
                raise errors.ConfigError(
                    f"RetryPolicy.overrides[{operation!r}] must be a RetrySettings, "
                    f"got {settings!r}"
                )
        if not callable(self.random):
            raise errors.ConfigError("RetryPolicy.random must be a callable returning [0, 1)")

    def settings_for(self, operation: str, service: str = "kinesis") -> RetrySettings:
        """The settings that apply to ``operation`` of ``service`` (a signing name)."""
        found = self.overrides.get(operation)
        if found is not None:
            return found
        return _SERVICE_DEFAULTS.get(service, {}).get(operation, self.default)

    def next_delay(
        self,
        operation: str,
        error: BaseException,
        retry: int,
        *,
        settings: RetrySettings | None = None,
        service: str = "kinesis",
    ) -> float | None:
        """Seconds to wait before retry number ``retry`` (0-based), or None to give up.

        None means the error is fatal, or the retries for this operation are used up; the
        caller then raises ``error``. ``settings`` overrides the operation's settings for
        one call.
        """
        if not is_retryable(error):
            return None
        if settings is None:
            settings = self.settings_for(operation, service)
        if retry >= settings.max_retries:
            return None
        return self.random() * settings.ceiling(retry)
