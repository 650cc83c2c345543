"""Enhanced Fan-Out consumer registration (FLIP-128's strategies) and cleanup.

* ``lazy``: every consumer process calls :func:`ensure_consumer` at open: find the consumer by
  its (deterministic) name, register it if absent, wait until it is ACTIVE. A concurrent
  registrant's ``ResourceInUseException`` is resolved with DescribeStreamConsumer, so racing
  workers end up with the same ARN and nothing leaks.
* ``eager``: a driver calls :func:`register_consumers` once and hands the ARNs to the workers
  as ``ConsumerConfig(consumer_arns=...)``.
* ``none``: the user supplies the ARNs; :func:`validate_consumer` checks them at open and fails
  fast when one is absent or belongs to another stream.

:func:`list_consumers` and :func:`deregister_consumer` are the functions behind
``kinesis-actors consumers list/deregister``. Retries and backoff per API are the client's
(:class:`~kinesis_actors.client.RetryPolicy`, FLIP-128 defaults, overridable per operation).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import anyio

from .. import errors
from ..client import KinesisClient, StreamRef
from ._config import ConsumerConfig

__all__ = [
    "CONSUMER_NAME_PREFIX",
    "check_efo_endpoint",
    "default_consumer_name",
    "deregister_consumer",
    "deregister_consumers",
    "deregisters_on_close",
    "ensure_consumer",
    "list_consumers",
    "register_consumers",
    "resolve_consumer_arns",
    "validate_consumer",
]

log = logging.getLogger("kinesis_actors.consumer")

#: Default consumer names start with this, so leftovers are easy to spot in a listing.
CONSUMER_NAME_PREFIX = "kinesis-actors-"
#: How often DescribeStreamConsumer is polled while waiting for a status change.
_POLL_INITIAL = 0.05
_POLL_MAX = 2.0


def default_consumer_name(streams: Iterable[str]) -> str:
    """The consumer name used when ``consumer_name`` is None.

    ``kinesis-actors-`` + the first 12 hex digits of the SHA-256 of the sorted stream names
    joined by ``","``. It depends only on the set of streams read, so every worker and every
    restart of one application agree on it without talking to each other. Two *different*
    applications reading the same streams would share it: give each its own ``consumer_name``.
    """
    digest = hashlib.sha256(",".join(sorted(streams)).encode()).hexdigest()
    return f"{CONSUMER_NAME_PREFIX}{digest[:12]}"


async def stream_arn(client: KinesisClient, stream: str) -> str:
    """The ARN of ``stream`` (a name or an ARN): consumers are registered and found by it.
    An ARN is its own answer, so no DescribeStreamSummary is made for it."""
    ref = StreamRef.parse(stream)
    if ref.arn is not None:
        return ref.arn
    summary = await client.call("DescribeStreamSummary", {"StreamName": stream})
    arn: str = summary["StreamDescriptionSummary"]["StreamARN"]
    return arn


async def _describe(client: KinesisClient, params: Mapping[str, str]) -> dict[str, Any] | None:
    try:
        result = await client.call("DescribeStreamConsumer", dict(params))
    except errors.ResourceNotFoundError:
        return None
    described: dict[str, Any] = result["ConsumerDescription"]
    return described


async def _wait_for(
    client: KinesisClient, params: Mapping[str, str], statuses: tuple[str | None, ...]
) -> dict[str, Any] | None:
    """Poll DescribeStreamConsumer with backoff until its status is one of ``statuses``
    (``None`` = absent); return the last description."""
    delay = _POLL_INITIAL
    while True:
        described = await _describe(client, params)
        status = None if described is None else described["ConsumerStatus"]
        if status in statuses:
            return described
        await anyio.sleep(delay)
        delay = min(delay * 2, _POLL_MAX)


async def ensure_consumer(client: KinesisClient, stream: str, name: str) -> str:
    """Find or register consumer ``name`` on ``stream``, wait until ACTIVE, return its ARN.

    Like every wait here it has no timeout of its own: bound it with ``anyio.fail_after``.
    """
    arn_of_stream = await stream_arn(client, stream)
    by_name = {"StreamARN": arn_of_stream, "ConsumerName": name}
    while True:
        described = await _describe(client, by_name)
        if described is not None and described["ConsumerStatus"] == "DELETING":
            await _wait_for(client, by_name, (None,))  # then register it again
            continue
        if described is None:
            try:
                registered = await client.call("RegisterStreamConsumer", by_name)
            except errors.ResourceInUseError:
                # Someone registered it between our Describe and Register: use theirs.
                log.info("consumer %s on %s registered concurrently; reusing it", name, stream)
                continue
            arn: str = registered["Consumer"]["ConsumerARN"]
            log.info("registered consumer %s on %s: %s", name, stream, arn)
        else:
            arn = described["ConsumerARN"]
            log.info("reusing consumer %s on %s: %s", name, stream, arn)
        active = await _wait_for(client, {"ConsumerARN": arn}, ("ACTIVE", None))
        if active is None:
            continue  # deregistered while we waited: start over
        return arn


async def register_consumers(
    client: KinesisClient,
    streams: str | Iterable[str],
    consumer_name: str | None = None,
) -> dict[str, str]:
    """The ``eager`` strategy's explicit step: ensure a consumer per stream; stream → ARN.

    Run it once (a driver, a main process) and pass the result to every worker as
    ``ConsumerConfig(registration="eager", consumer_arns=...)``. Streams may be given by name
    or ARN; the result is keyed by stream name, as the consumer keys them.
    """
    given = [streams] if isinstance(streams, str) else list(streams)
    refs = {StreamRef.parse(stream, option="streams").name: stream for stream in given}
    name = consumer_name or default_consumer_name(refs)
    arns: dict[str, str] = {}
    for stream, ref in refs.items():
        arns[stream] = await ensure_consumer(client, ref, name)
    return arns


async def validate_consumer(client: KinesisClient, stream: str, arn: str) -> None:
    """Check that ``arn`` is a consumer of ``stream``; wait until it is ACTIVE.

    An absent or malformed ARN, or one of another stream, is a :class:`ConfigError` naming
    ``consumer_arns``: with ``registration="none"`` nothing else will create it.
    """
    try:
        described = await _describe(client, {"ConsumerARN": arn})
    except errors.ValidationError as exc:
        raise errors.ConfigError(f"ConsumerConfig.consumer_arns[{stream!r}]: {exc}") from exc
    if described is None or described["ConsumerStatus"] == "DELETING":
        raise errors.ConfigError(
            f"ConsumerConfig.consumer_arns[{stream!r}]: no consumer {arn} (register it first)"
        )
    expected = await stream_arn(client, stream)
    if described.get("StreamARN", expected) != expected:
        raise errors.ConfigError(
            f"ConsumerConfig.consumer_arns[{stream!r}]: {arn} is a consumer of "
            f"{described['StreamARN']}, not of {expected}"
        )
    if (
        described["ConsumerStatus"] != "ACTIVE"
        and await _wait_for(client, {"ConsumerARN": arn}, ("ACTIVE", None)) is None
    ):
        raise errors.ConfigError(
            f"ConsumerConfig.consumer_arns[{stream!r}]: {arn} was deregistered"
        )


async def list_consumers(client: KinesisClient, stream: str) -> list[dict[str, Any]]:
    """Every consumer registered on ``stream`` (name, ARN, status, creation time)."""
    params: dict[str, Any] = {"StreamARN": await stream_arn(client, stream)}
    out: list[dict[str, Any]] = []
    while True:
        page = await client.call("ListStreamConsumers", params)
        out.extend(page.get("Consumers") or ())
        token = page.get("NextToken")
        if not token:
            return out
        params = {"StreamARN": params["StreamARN"], "NextToken": token}


async def deregister_consumer(
    client: KinesisClient, stream: str, name: str, *, wait: bool = True
) -> bool:
    """Deregister consumer ``name`` from ``stream``; False if there was none.

    With ``wait``, a consumer still being created is waited for (the service refuses to
    deregister it until it is ACTIVE), and this returns once it is gone (bound it with
    ``anyio.fail_after``).
    """
    by_name = {"StreamARN": await stream_arn(client, stream), "ConsumerName": name}
    try:
        await client.call("DeregisterStreamConsumer", by_name)
    except errors.ResourceNotFoundError:
        return False
    except errors.ResourceInUseError:
        if not wait:
            raise
        if await _wait_for(client, by_name, ("ACTIVE", None)) is None:
            return False  # deleted meanwhile by someone else
        await client.call("DeregisterStreamConsumer", by_name)
    if wait:
        await _wait_for(client, by_name, (None,))
    log.info("deregistered consumer %s from %s", name, stream)
    return True


async def deregister_consumers(
    client: KinesisClient, arns: Mapping[str, str], *, wait: bool = True
) -> None:
    """Deregister consumers by ARN (stream → ARN, as :func:`register_consumers` returns);
    with ``wait``, return once they are gone."""
    for stream, arn in arns.items():
        try:
            await client.call("DeregisterStreamConsumer", {"ConsumerARN": arn})
        except errors.ResourceNotFoundError:
            continue
        log.info("deregistered consumer %s of %s", arn, stream)
    if wait:
        for arn in arns.values():
            await _wait_for(client, {"ConsumerARN": arn}, (None,))


def check_efo_endpoint(client: KinesisClient) -> None:
    """EFO needs TLS (SubscribeToShard is HTTP/2 over TLS): a ConfigError before any call."""
    endpoint = client.endpoint_url
    if endpoint is not None and endpoint.startswith("http:"):
        raise errors.ConfigError(
            "ConsumerConfig.mode='efo' needs an https endpoint (SubscribeToShard is HTTP/2 "
            f"over TLS), the client has {endpoint!r}"
        )


def deregisters_on_close(config: ConsumerConfig) -> bool:
    """Whether a clean close deregisters (see ``ConsumerConfig.deregister_on_close``)."""
    if config.mode != "efo":
        return False
    if config.deregister_on_close is not None:
        return config.deregister_on_close
    # With several workers, one worker's close must not pull the consumer from the others.
    # A lease table means a group: the others are still reading through the same consumer.
    return config.registration == "lazy" and config.worker_count == 1 and config.lease_table is None


async def resolve_consumer_arns(
    client: KinesisClient, streams: Mapping[str, str], config: ConsumerConfig
) -> dict[str, str]:
    """What a consumer does at open in EFO mode, per ``registration``; stream name → ARN.

    ``streams`` maps each stream's name to its name or ARN as given. The default consumer
    name hashes the names, so a stream read by name or by ARN has the same consumer; the
    user's ``consumer_arns`` may be keyed by either."""
    if config.registration == "lazy":
        name = config.consumer_name or default_consumer_name(streams)
        return {stream: await ensure_consumer(client, ref, name) for stream, ref in streams.items()}
    arns = config.consumer_arns
    given = {stream: arns.get(stream) or arns.get(ref) for stream, ref in streams.items()}
    missing = [stream for stream, arn in given.items() if arn is None]
    if missing:
        raise errors.ConfigError(
            f'ConsumerConfig.consumer_arns has no ARN for {missing!r} (registration="'
            f'{config.registration}"): pass what register_consumers() returned'
        )
    found = {stream: arn for stream, arn in given.items() if arn is not None}
    for stream, arn in found.items():
        await validate_consumer(client, streams[stream], arn)
    return found
