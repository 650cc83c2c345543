"""The polling reader retries what the client's ``is_retryable`` allows, and nothing else.

``errors.CertificateError`` is a ``TransportError`` (a failed handshake is a transport failure)
but a permanent one: another attempt meets the same certificate. The reader,
which catches transport errors to back a shard off, must raise it at once, after one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pytest

from kinesis_actors import KinesisClient, errors
from kinesis_actors.consumer import PollingReader, StartingPosition
from kinesis_actors.consumer._metrics import ShardMetrics
from kinesis_actors.consumer._pacing import PacingSettings, ReadPacer

pytestmark = pytest.mark.anyio

_BAD_CERTIFICATE = "the server's TLS certificate failed verification"


class _Scripted:
    """A client whose calls answer from ``script`` (an error is raised), recording them."""

    def __init__(self, script: Mapping[str, Any]) -> None:
        self.script = script
        self.calls: list[str] = []

    async def call(
        self, operation: str, params: Mapping[str, Any], *, epoch_timestamps: bool = False
    ) -> dict[str, Any]:
        self.calls.append(operation)
        answer = self.script[operation]
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)


def _reader(client: _Scripted, metrics: ShardMetrics) -> PollingReader:
    return PollingReader(
        cast(KinesisClient, client),
        "s",
        "shardId-000000000000",
        StartingPosition.trim_horizon(),
        pacer=ReadPacer(PacingSettings()),
        metrics=metrics,
        limit=100,
    )


async def test_a_certificate_error_on_a_read_is_raised_at_once() -> None:
    client = _Scripted(
        {"GetShardIterator": errors.CertificateError(_BAD_CERTIFICATE, operation="x")}
    )
    metrics = ShardMetrics()
    with pytest.raises(errors.CertificateError):
        await _reader(client, metrics).read()
    assert client.calls == ["GetShardIterator"]
    assert metrics.transient_errors == 0


async def test_a_certificate_error_while_checking_the_shard_list_is_raised_at_once() -> None:
    client = _Scripted(
        {
            "GetShardIterator": {"ShardIterator": "it-1"},
            "GetRecords": errors.ResourceNotFoundError("gone?", operation="GetRecords"),
            "ListShards": errors.CertificateError(_BAD_CERTIFICATE, operation="ListShards"),
        }
    )
    with pytest.raises(errors.CertificateError):
        await _reader(client, ShardMetrics()).read()
    assert client.calls == ["GetShardIterator", "GetRecords", "ListShards"]


async def test_a_retryable_transport_error_is_still_retried() -> None:
    client = _Scripted(
        {
            "GetShardIterator": errors.TransportError("reset", operation="GetShardIterator"),
        }
    )
    metrics = ShardMetrics()
    reader = PollingReader(
        cast(KinesisClient, client),
        "s",
        "shardId-000000000000",
        StartingPosition.trim_horizon(),
        pacer=ReadPacer(
            PacingSettings(
                throttle_initial=0.001,
                throttle_max=0.001,
                max_calls_per_second=1e4,
                max_iterators_per_second=1e4,
            )
        ),
        metrics=metrics,
        limit=100,
    )
    with pytest.raises(errors.TransportError) as caught:
        await reader.read()
    assert not isinstance(caught.value, errors.CertificateError)
    assert len(client.calls) == 6  # the first and five more, then the supervisor decides
    assert metrics.transient_errors == 6
