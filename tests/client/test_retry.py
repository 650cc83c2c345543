"""The retry policy, sans-IO: delays drawn without a loop or a clock."""

from __future__ import annotations

import random

import pytest

from kinesis_actors import errors
from kinesis_actors.client import DEFAULT_RETRY_SETTINGS, RetryPolicy, RetrySettings


def _delays(policy: RetryPolicy, operation: str, error: Exception) -> list[float]:
    """Drive the policy like the client does, with a virtual clock: collect every delay."""
    delays: list[float] = []
    attempt = 0
    while (delay := policy.next_delay(operation, error, attempt)) is not None:
        delays.append(delay)
        attempt += 1
    return delays


def test_jittered_delays_stay_within_the_capped_exponential_bounds() -> None:
    settings = RetrySettings(max_retries=40, base=0.1, max=2.0, exponential_constant=1.5)
    policy = RetryPolicy(default=settings, random=random.Random(7).random)
    delays = _delays(policy, "AnyOperation", errors.ThrottlingError("slow down"))
    assert len(delays) == 40
    for retry, delay in enumerate(delays):
        ceiling = min(2.0, 0.1 * 1.5**retry)
        assert 0.0 <= delay <= ceiling
    # Full jitter: the draws are spread over the range, not pinned to the ceiling.
    assert min(delays[10:]) < 1.0 < max(delays[10:])


def test_ceiling_grows_exponentially_then_caps() -> None:
    settings = RetrySettings(max_retries=100, base=0.3, max=1.0, exponential_constant=1.5)
    assert settings.ceiling(0) == pytest.approx(0.3)
    assert settings.ceiling(1) == pytest.approx(0.45)
    assert settings.ceiling(2) == pytest.approx(0.675)
    assert settings.ceiling(3) == 1.0
    assert settings.ceiling(10_000) == 1.0  # no overflow for absurd retry counts


def test_throttling_is_retried_until_the_operation_limit() -> None:
    policy = RetryPolicy(random=lambda: 1.0)
    delays = _delays(policy, "GetRecords", errors.ThrottlingError("x"))
    # FLIP-128: GetRecords retries 3 times, base 300 ms, max 1 s, constant 1.5.
    assert delays == pytest.approx([0.3, 0.45, 0.675])


@pytest.mark.parametrize(
    "error",
    [
        errors.ThrottlingError("x"),
        errors.ServiceError("x"),
        errors.MalformedReplyError("x"),
        errors.TransportError("x"),
    ],
)
def test_retryable_errors_get_a_delay(error: Exception) -> None:
    assert RetryPolicy(random=lambda: 0.5).next_delay("ListShards", error, 0) == 0.5


@pytest.mark.parametrize(
    "error",
    [
        errors.ResourceNotFoundError("x"),
        errors.ValidationError("x"),
        errors.AccessDeniedError("x"),
        errors.ExpiredIteratorError("x"),
        errors.ResourceInUseError("x"),
        errors.CertificateError("x"),
        ValueError("not ours"),
    ],
)
def test_fatal_errors_are_not_retried(error: Exception) -> None:
    assert RetryPolicy().next_delay("ListShards", error, 0) is None


def test_overrides_and_defaults_per_operation() -> None:
    mine = RetrySettings(max_retries=1, base=0.01, max=0.02)
    policy = RetryPolicy(overrides={"PutRecords": mine})
    assert policy.settings_for("PutRecords") is mine
    assert policy.settings_for("SubscribeToShard") == DEFAULT_RETRY_SETTINGS["SubscribeToShard"]
    assert policy.settings_for("ListStreams") == RetrySettings()


def test_a_per_call_override_wins() -> None:
    policy = RetryPolicy(random=lambda: 1.0)
    once = RetrySettings(max_retries=1, base=0.5, max=0.5)
    error = errors.ThrottlingError("x")
    assert policy.next_delay("GetRecords", error, 0, settings=once) == 0.5
    assert policy.next_delay("GetRecords", error, 1, settings=once) is None


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"default": {"max_retries": 1}}, "RetryPolicy.default"),
        ({"overrides": {"PutRecords": 3}}, r"RetryPolicy.overrides\['PutRecords'\]"),
        ({"random": 0.5}, "RetryPolicy.random"),
    ],
)
def test_bad_policy_names_the_option(kwargs: dict[str, object], option: str) -> None:
    with pytest.raises(errors.ConfigError, match=option):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_retries": -1}, "RetrySettings.max_retries"),
        ({"max_retries": 1.5}, "RetrySettings.max_retries"),
        ({"base": 0}, "RetrySettings.base"),
        ({"base": float("nan")}, "RetrySettings.base"),
        ({"base": 2.0, "max": 1.0}, "RetrySettings.max"),
        ({"exponential_constant": 0.5}, "RetrySettings.exponential_constant"),
    ],
)
def test_bad_settings_name_the_option(kwargs: dict[str, float], option: str) -> None:
    with pytest.raises(errors.ConfigError, match=option):
        RetrySettings(**kwargs)  # type: ignore[arg-type]


def test_max_retries_zero_means_one_attempt() -> None:
    policy = RetryPolicy(random=lambda: 1.0)
    once = RetrySettings(max_retries=0)
    for error in (errors.ThrottlingError("x"), errors.MalformedReplyError("x")):
        assert policy.next_delay("PutRecords", error, 0, settings=once) is None


@pytest.mark.parametrize(
    ("operation", "attempts", "bound"),
    [
        ("GetRecords", 4, 1.43),
        ("GetShardIterator", 4, 1.43),
        ("RegisterStreamConsumer", 11, 16.1),
        ("DeregisterStreamConsumer", 11, 16.1),
        ("SubscribeToShard", 11, 18.5),
        ("ListStreamConsumers", 11, 24.7),
        ("PutRecords", 11, 24.7),
        ("ListShards", 11, 38.2),
        ("DescribeStreamSummary", 51, 244.5),
        ("DescribeStreamConsumer", 51, 244.5),
    ],
)
def test_a_garbled_reply_forever_is_bounded_as_the_docs_say(
    operation: str, attempts: int, bound: float
) -> None:
    # The table in docs/architecture.md, "Retries": the ceilings, drawn at their maximum.
    delays = _delays(RetryPolicy(random=lambda: 1.0), operation, errors.MalformedReplyError("x"))
    assert len(delays) + 1 == attempts
    assert bound - 0.1 < sum(delays) <= bound
