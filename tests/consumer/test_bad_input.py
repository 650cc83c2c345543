"""Bad input fails early and clearly: ConfigError before any network call, or a typed error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kinesis_actors import KinesisClient, LocalKinesis, errors
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition

pytestmark = pytest.mark.anyio


@pytest.fixture
async def plain_client(local_kinesis: LocalKinesis) -> AsyncIterator[KinesisClient]:
    async with local_kinesis.client(tls=False) as kinesis:
        yield kinesis


async def test_an_unknown_stream_fails_at_open(plain_client: KinesisClient) -> None:
    consumer = Consumer(plain_client, "no-such-stream")
    with pytest.raises(errors.ResourceNotFoundError):
        async with consumer:
            pass


async def test_one_unknown_stream_among_known_ones_fails_at_open(
    plain_client: KinesisClient, stream_name: str
) -> None:
    await plain_client.create_stream(stream_name, 1)
    with pytest.raises(errors.ResourceNotFoundError):
        async with Consumer(plain_client, [stream_name, "no-such-stream"]):
            pass


async def test_efo_mode_needs_an_https_endpoint(
    plain_client: KinesisClient, stream_name: str
) -> None:
    calls = plain_client.statistics().calls
    with pytest.raises(errors.ConfigError, match="https"):
        async with Consumer(plain_client, stream_name, ConsumerConfig(mode="efo")):
            pass
    assert plain_client.statistics().calls == calls  # refused before any network call


async def test_a_consumer_used_out_of_its_order_fails_clearly_before_any_call(
    plain_client: KinesisClient, stream_name: str
) -> None:
    calls = plain_client.statistics().calls
    consumer = Consumer(plain_client, stream_name)
    with pytest.raises(RuntimeError, match="not open"):
        await consumer.__anext__()
    consumer.stop()  # nothing to stop yet
    await consumer.aclose()  # never opened: closed for good all the same
    with pytest.raises(errors.ConsumerClosedError):
        await consumer.__anext__()
    with pytest.raises(RuntimeError, match="only once"):
        async with consumer:
            pass
    assert plain_client.statistics().calls == calls


def test_a_timestamp_in_the_future_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="future"):
        StartingPosition.at_timestamp(datetime.now(UTC) + timedelta(hours=1))
    past = StartingPosition.at_timestamp(datetime(2024, 1, 1))  # naive: taken as UTC
    assert past.timestamp is not None and past.timestamp.tzinfo is UTC


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"worker_index": 2, "worker_count": 2}, "worker_index"),
        ({"worker_index": -1}, "worker_index"),
        ({"worker_count": 0}, "worker_count"),
        ({"mode": "push"}, "mode"),
        ({"registration": "sometimes"}, "registration"),
        ({"prefetch_batches": 0}, "prefetch_batches"),
        ({"max_records_per_call": 10_001}, "max_records_per_call"),
        ({"max_calls_per_second": 6}, "max_calls_per_second"),
        ({"shard_discovery_interval": 0}, "shard_discovery_interval"),
        ({"list_shards_page_size": 0}, "list_shards_page_size"),
        ({"idle_backoff_initial": 2.0, "idle_backoff_max": 1.0}, "idle_backoff_max"),
        ({"idle_reads_per_second": 0}, "idle_reads_per_second"),
        ({"idle_reads_per_second": "many"}, "idle_reads_per_second"),
        ({"restart_intensity": (1,)}, "restart_intensity"),
        ({"start": "latest"}, "start"),
        ({"start": StartingPosition.at_sequence_number("1")}, "start"),
        ({"consumer_name": ""}, "consumer_name"),
        ({"mode": "efo", "registration": "none"}, "consumer_arns"),
        ({"mode": "efo", "registration": "eager"}, "consumer_arns"),
        ({"efo_watchdog_timeout": 0}, "efo_watchdog_timeout"),
        ({"efo_subscription_lifetime": -1}, "efo_subscription_lifetime"),
        ({"efo_fallback_after": 0}, "efo_fallback_after"),
        ({"efo_fallback_after": float("inf")}, "efo_fallback_after"),
        ({"efo_fallback_after": "30"}, "efo_fallback_after"),
        ({"deregister_on_close": "yes"}, "deregister_on_close"),
        ({"positions": [1, 2]}, "positions"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, Any], named: str) -> None:
    with pytest.raises(errors.ConfigError, match=named):
        ConsumerConfig(**options)


GOOD_SHARD = {"sequence_number": "49590338271490256608559692538361571095921575989136588898"}


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        ({"streams": {}}, "version"),
        ({"version": 99, "streams": {}}, "version"),
        ({"version": 1}, "streams"),
        ({"version": 1, "streams": {"other-stream": {}}}, "does not read"),
        ({"version": 1, "streams": {"s": []}}, "dict"),
        ({"version": 1, "streams": {"s": {"shardId-0": "yesterday"}}}, "dict"),
        ({"version": 1, "streams": {"s": {"shardId-0": {"sequence_number": "12ab"}}}}, "digits"),
        (
            {
                "version": 1,
                "streams": {"s": {"shardId-0": {**GOOD_SHARD, "sub_sequence_number": -1}}},
            },
            "sub_sequence_number",
        ),
        ({"version": 1, "streams": {"s": {"shardId-0": {"finished": "yes"}}}}, "neither"),
        ({"version": 1, "streams": {"s": {"shardId-0": {"start": {"type": "SOON"}}}}}, "type"),
    ],
)
async def test_bad_positions_are_config_errors_before_any_call(
    plain_client: KinesisClient, positions: dict[str, Any], message: str
) -> None:
    calls = plain_client.statistics().calls
    with pytest.raises(errors.ConfigError, match=message):
        Consumer(plain_client, "s", ConsumerConfig(positions=positions))
    assert plain_client.statistics().calls == calls


@pytest.mark.parametrize("streams", [[], "", ["a", "a"], [1], None])
async def test_bad_stream_lists(plain_client: KinesisClient, streams: Any) -> None:
    with pytest.raises(errors.ConfigError, match="streams"):
        Consumer(plain_client, streams)


def test_the_client_must_be_a_client() -> None:
    with pytest.raises(errors.ConfigError, match="client"):
        Consumer("http://localhost", "s")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["bad name!", "x" * 129, "ü"])
async def test_stream_names_follow_the_service_rule_before_any_call(
    plain_client: KinesisClient, name: str
) -> None:
    calls = plain_client.statistics().calls
    with pytest.raises(errors.ConfigError, match="stream name"):
        Consumer(plain_client, name)
    assert plain_client.statistics().calls == calls


async def test_a_200_digit_sequence_number_is_a_config_error_before_any_call(
    plain_client: KinesisClient,
) -> None:
    """before, the server rejected it 6 times, then RestartIntensityExceeded."""
    positions = {"version": 1, "streams": {"s": {"shardId-0": {"sequence_number": "1" * 200}}}}
    calls = plain_client.statistics().calls
    with pytest.raises(errors.ConfigError, match=r"positions.*sequence_number"):
        Consumer(plain_client, "s", ConsumerConfig(positions=positions))
    assert plain_client.statistics().calls == calls


@pytest.mark.parametrize(
    "identity",
    [[], {"s": "arn"}, {"s": {"arn": "a", "created": "yesterday"}}, {"other": {}}],
)
async def test_a_malformed_identity_in_positions_is_a_config_error(
    plain_client: KinesisClient, identity: Any
) -> None:
    positions = {"version": 1, "streams": {"s": {}}, "identity": identity}
    with pytest.raises(errors.ConfigError, match="identity"):
        Consumer(plain_client, "s", ConsumerConfig(positions=positions))
