"""This project and its peers behind one interface, so every scenario runs them all alike.

Producers push ``count`` records (or push for ``seconds``) of one size into a
:class:`LoadTarget`, then flush; consumers read ``count`` user records from a synthetic one.
Each measures with :class:`~benchmarks._common.Clock` from the moment its client is open (a
consumer's clock includes opening, which costs loopback calls for everyone) until the last
record is acknowledged (produced) or yielded (consumed).

Pointing the peers at the target: aiokpl takes ``Config(endpoint_url=..., aws_access_key_id=
...)``; async-kinesis takes ``endpoint_url=`` and an ``AioSession`` whose credentials are set;
both sit on aiobotocore, which speaks HTTP/1.1, so they use the target's plain port. A peer
that cannot do what a row asks raises :class:`Unsupported` with the reason; the suite records
it in the JSON and the table instead of dropping the row.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from benchmarks._common import KEYS, Clock, payloads
from benchmarks.loadtarget import MIB, LoadTarget
from kinesis_actors import Consumer, ConsumerConfig, StartingPosition
from kinesis_actors.producer import Producer, ProducerConfig

__all__ = [
    "CONSUMERS",
    "PRODUCERS",
    "PROJECT",
    "PROJECT_BATCH",
    "ConsumeSpec",
    "PushSpec",
    "Unsupported",
]

PROJECT = "kinesis-actors"
UNPACED = 1000.0  # rate_limit that keeps our pacer out of the way of a target without limits
UNBUDGETED = 1e12  # max_bytes_per_second that never binds
CREDENTIALS = ("load-target", "load-target")
REGION = "us-east-1"
BATCH = 64  # records pushed between deadline checks

# async-kinesis warns about the unpaced bandwidth setting and about the connection it drops
# on close; neither is news to a benchmark reader.
logging.getLogger("kinesis").setLevel(logging.ERROR)


class Unsupported(Exception):
    """The peer cannot run this row; the message says why (it goes into the table)."""


@dataclass(frozen=True, slots=True)
class PushSpec:
    """What a producer row asks: ``count`` records, or as many as fit in ``seconds``.

    ``paced`` keeps each producer's own pacing at the service's per-shard limits (the capacity
    scenario); unpaced rows lift it so the client, not its pacer, is what is measured.
    """

    record_bytes: int
    aggregation: bool
    count: int | None = None
    seconds: float | None = None
    paced: bool = False
    unique_keys: bool = False  # a new partition key per record (UUIDs), not 1,000 that repeat


def partition_keys(spec: PushSpec) -> list[str]:
    """The keys a row's records take in turn: ``KEYS``, or one per record of a counted row."""
    if not spec.unique_keys:
        return KEYS
    if spec.count is None:
        raise ValueError("unique_keys needs a counted row (count, not seconds)")
    return [f"user-{index:010d}" for index in range(spec.count)]


@dataclass(frozen=True, slots=True)
class ConsumeSpec:
    """What a consumer row asks: read ``count`` user records in ``mode`` from TRIM_HORIZON.

    ``aggregated``: the target serves KPL aggregates, which the consumer must unpack.
    ``max_records_per_call`` is GetRecords' ``Limit`` for the polling rows.
    """

    count: int
    mode: str = "polling"
    aggregated: bool = False
    max_records_per_call: int = 10_000


def _feed(spec: PushSpec) -> Callable[[int], bool]:
    """``more(index)``: whether record ``index`` should still be pushed."""
    if spec.count is not None:
        count = spec.count
        return lambda index: index < count
    deadline = time.perf_counter() + (spec.seconds or 0.0)
    return lambda index: index % BATCH != 0 or time.perf_counter() < deadline


# -- producers ---------------------------------------------------------------------------------

PROJECT_BATCH = f"{PROJECT} put_many"
PUT_MANY = 500  # records per put_many call (a PutRecords call's worth)


def push_project(target: LoadTarget, spec: PushSpec, clock: Clock) -> dict[str, Any]:
    """This project's Producer: ``put`` as fast as it returns, then ``flush``."""

    async def run() -> dict[str, Any]:
        config = ProducerConfig(
            aggregation=spec.aggregation, rate_limit=1.0 if spec.paced else UNPACED
        )
        data, more, keys = payloads(spec.record_bytes), _feed(spec), partition_keys(spec)
        async with (
            target.client() as client,
            Producer(client, target.stream_name, config) as producer,
        ):
            clock.start()
            put, index = producer.put, 0
            while more(index):
                await put(data[index % len(data)], keys[index % len(keys)])
                index += 1
            await producer.flush()
            clock.stop()
            metrics = producer.metrics
        return {
            "records": metrics.records_sent,
            "failed": metrics.records_failed,
            "calls": metrics.calls,
            "throttled": metrics.throttled,
        }

    return anyio.run(run)


def push_project_batch(target: LoadTarget, spec: PushSpec, clock: Clock) -> dict[str, Any]:
    """This project's Producer, ``put_many`` of 500 records at a time, then ``flush``: the
    same bounded queue, pacing, retries and a handle per record as ``put``."""

    async def run() -> dict[str, Any]:
        config = ProducerConfig(
            aggregation=spec.aggregation, rate_limit=1.0 if spec.paced else UNPACED
        )
        data, more, keys = payloads(spec.record_bytes), _feed(spec), partition_keys(spec)
        count = len(data)
        async with (
            target.client() as client,
            Producer(client, target.stream_name, config) as producer,
        ):
            clock.start()
            put_many, index = producer.put_many, 0
            while more(index):
                chunk = [
                    (data[i % count], keys[i % len(keys)])
                    for i in range(index, index + PUT_MANY)
                    if more(i)
                ]
                await put_many(chunk)
                index += len(chunk)
            await producer.flush()
            clock.stop()
            metrics = producer.metrics
        return {
            "records": metrics.records_sent,
            "failed": metrics.records_failed,
            "calls": metrics.calls,
            "throttled": metrics.throttled,
        }

    return anyio.run(run)


def push_aiokpl(target: LoadTarget, spec: PushSpec, clock: Clock) -> dict[str, Any]:
    """aiokpl's Producer: ``put_record`` returns an Outcome; done when all have settled."""
    from aiokpl import Config  # noqa: PLC0415 - optional peer
    from aiokpl import Producer as KplProducer  # noqa: PLC0415

    limits = (1000.0, float(MIB)) if spec.paced else (1e12, 1e15)
    config = Config(
        region=REGION,
        endpoint_url=target.endpoint_url,
        aws_access_key_id=CREDENTIALS[0],
        aws_secret_access_key=CREDENTIALS[1],
        aggregation_enabled=spec.aggregation,
        rate_limit_records_per_sec_per_shard=limits[0],
        rate_limit_bytes_per_sec_per_shard=limits[1],
    )

    async def run() -> dict[str, Any]:
        data, more, keys = payloads(spec.record_bytes), _feed(spec), partition_keys(spec)
        stream = target.stream_name
        pending: collections.deque[Any] = collections.deque()
        succeeded = failed = 0

        def settle(results: list[Any]) -> None:
            nonlocal succeeded, failed
            for result in results:
                if result.success:
                    succeeded += 1
                else:
                    failed += 1

        async with KplProducer(config) as producer:
            clock.start()
            index = 0
            while more(index):
                pending.append(
                    await producer.put_record(
                        stream=stream,
                        partition_key=keys[index % len(keys)],
                        data=data[index % len(data)],
                    )
                )
                index += 1
                if index % 1024 == 0:  # drop what has settled, keep memory flat
                    done = []
                    while pending and pending[0].is_set():
                        done.append(await pending.popleft().wait())
                    settle(done)
            await producer.flush()
            settle([await outcome.wait() for outcome in pending])
            clock.stop()
        return {"records": succeeded, "failed": failed}

    return asyncio.run(run())


class _RawSerializer:
    """async-kinesis's processors serialize (JSON by default); the bench sends raw bytes."""

    def serialize(self, item: bytes) -> bytes:
        return item

    def deserialize(self, data: bytes) -> bytes:
        return data


def _async_kinesis_processor(aggregation: bool) -> Any:
    from kinesis.aggregators import KPLAggregator, SimpleAggregator  # noqa: PLC0415
    from kinesis.processors import Processor  # noqa: PLC0415

    base = KPLAggregator if aggregation else SimpleAggregator
    return type("RawProcessor", (Processor, base, _RawSerializer), {})()


def _aio_session() -> Any:
    from aiobotocore.session import AioSession  # noqa: PLC0415

    session = AioSession()
    session.set_credentials(*CREDENTIALS)
    return session


def push_async_kinesis(target: LoadTarget, spec: PushSpec, clock: Clock) -> dict[str, Any]:
    """async-kinesis's Producer: ``put`` queues; ``flush`` sends what is queued.

    Its KPL aggregation takes no partition keys (every aggregate gets a generated one), so the
    aggregated rows push without keys.
    """
    from kinesis import Producer as AkProducer  # noqa: PLC0415 - optional peer

    acknowledged = 0

    async def after_flush(items: list[Any]) -> None:
        nonlocal acknowledged
        acknowledged += sum(item.n for item in items)

    limits = (1000, 1024) if spec.paced else (10**9, 10**9)

    async def run() -> dict[str, Any]:
        data, more, keys = payloads(spec.record_bytes), _feed(spec), partition_keys(spec)
        async with AkProducer(
            target.stream_name,
            session=_aio_session(),
            endpoint_url=target.endpoint_url,
            region_name=REGION,
            processor=_async_kinesis_processor(spec.aggregation),
            use_list_shards=True,
            put_rate_limit_per_shard=limits[0],
            put_bandwidth_limit_per_shard=limits[1],
            after_flush_fun=after_flush,
        ) as producer:
            clock.start()
            index = 0
            while more(index):
                key = None if spec.aggregation else keys[index % len(keys)]
                await producer.put(data[index % len(data)], key)
                index += 1
            await producer.flush()
            clock.stop()
            throttles = producer.throughput_exceeded_count
        return {"records": acknowledged, "failed": index - acknowledged, "throttled": throttles}

    return asyncio.run(run())


def boto3_client(target: LoadTarget) -> Any:
    import boto3  # noqa: PLC0415 - optional peer

    return boto3.client(
        "kinesis",
        region_name=REGION,
        endpoint_url=target.endpoint_url,
        aws_access_key_id=CREDENTIALS[0],
        aws_secret_access_key=CREDENTIALS[1],
    )


def push_boto3(target: LoadTarget, spec: PushSpec, clock: Clock) -> dict[str, Any]:
    """boto3 ``put_records``, 500 entries (5 MiB at most) a call; failed entries are resent
    after 50 ms. With ``aggregation`` the records go through aws-kinesis-agg first."""
    client = boto3_client(target)
    data, more, keys = payloads(spec.record_bytes), _feed(spec), partition_keys(spec)
    stream = target.stream_name
    calls = retried = 0
    batch: list[dict[str, Any]] = []
    batch_bytes = 0

    def send() -> None:
        nonlocal batch, batch_bytes, calls, retried
        entries, batch, batch_bytes = batch, [], 0
        while entries:
            answer = client.put_records(StreamName=stream, Records=entries)
            calls += 1
            entries = [
                entry
                for entry, result in zip(entries, answer["Records"], strict=True)
                if result.get("ErrorCode")
            ]
            if entries:
                retried += len(entries)
                time.sleep(0.05)

    def add(entry: dict[str, Any]) -> None:
        nonlocal batch_bytes
        size = len(entry["Data"]) + len(entry["PartitionKey"])
        if len(batch) == 500 or batch_bytes + size > 5 * MIB:
            send()
        batch.append(entry)
        batch_bytes += size

    def add_aggregate(record: Any) -> None:
        key, explicit, blob = record.get_contents()
        entry = {"Data": blob, "PartitionKey": key}
        if explicit is not None:
            entry["ExplicitHashKey"] = explicit
        add(entry)

    client.put_records(StreamName=stream, Records=[{"Data": b"x", "PartitionKey": "w"}])
    clock.start()
    index = 0
    if spec.aggregation:
        from aws_kinesis_agg.aggregator import RecordAggregator  # noqa: PLC0415

        aggregator = RecordAggregator()
        while more(index):
            full = aggregator.add_user_record(keys[index % len(keys)], data[index % len(data)])
            if full is not None:
                add_aggregate(full)
            index += 1
        rest = aggregator.clear_and_get()
        if rest is not None:
            add_aggregate(rest)
    else:
        while more(index):
            add({"Data": data[index % len(data)], "PartitionKey": keys[index % len(keys)]})
            index += 1
    if batch:
        send()
    clock.stop()
    return {"records": index, "failed": 0, "calls": calls, "throttled": retried}


@dataclass(frozen=True, slots=True)
class ProducerPeer:
    """A producer in the comparison: ``push`` runs one row; ``note`` goes into the table."""

    name: str
    push: Callable[[LoadTarget, PushSpec, Clock], dict[str, Any]]
    note: str


PRODUCERS = [
    ProducerPeer(PROJECT, push_project, "Producer; rate_limit lifted when unpaced"),
    ProducerPeer(PROJECT_BATCH, push_project_batch, "Producer.put_many of 500, same safeties"),
    ProducerPeer("aiokpl", push_aiokpl, "aiokpl.Producer, rate limits lifted when unpaced"),
    ProducerPeer(
        "async-kinesis",
        push_async_kinesis,
        "kinesis.Producer, raw bytes; aggregated rows carry no partition keys (unsupported)",
    ),
    ProducerPeer("boto3", push_boto3, "put_records x500, aws-kinesis-agg when aggregating"),
]


# -- consumers ---------------------------------------------------------------------------------


def consume_project(target: LoadTarget, spec: ConsumeSpec, clock: Clock) -> dict[str, Any]:
    """This project's Consumer (``async for`` + ``commit``), polling unbudgeted or EFO."""
    start = StartingPosition.trim_horizon()
    if spec.mode == "efo":
        config = ConsumerConfig(start=start, mode="efo", registration="lazy")
    else:
        config = ConsumerConfig(
            start=start,
            max_bytes_per_second=UNBUDGETED,
            max_records_per_call=spec.max_records_per_call,
        )

    async def run() -> dict[str, Any]:
        async with target.client(tls=True) as client:
            clock.start()
            records = 0
            async with Consumer(client, target.stream_name, config) as consumer:
                async for batch in consumer:
                    records += len(batch)
                    consumer.commit(batch)
                    if records >= spec.count:
                        break
                clock.stop()
        return {"records": records}

    return anyio.run(run)


def consume_async_kinesis(target: LoadTarget, spec: ConsumeSpec, clock: Clock) -> dict[str, Any]:
    """async-kinesis's Consumer: GetRecords at 5 calls/s a shard, one item per user record."""
    if spec.mode == "efo":
        raise Unsupported("async-kinesis has no Enhanced Fan-Out (SubscribeToShard) consumer")
    from kinesis import Consumer as AkConsumer  # noqa: PLC0415 - optional peer

    async def run() -> dict[str, Any]:
        clock.start()
        records = 0
        async with AkConsumer(
            target.stream_name,
            session=_aio_session(),
            endpoint_url=target.endpoint_url,
            region_name=REGION,
            processor=_async_kinesis_processor(spec.aggregated),
            use_list_shards=True,
            shard_fetch_rate=5,
            record_limit=spec.max_records_per_call,
            sleep_time_no_records=0.2,
        ) as consumer:
            async for _item in consumer:
                records += 1
                if records >= spec.count:
                    break
            clock.stop()
        await _cancel_leftovers()
        return {"records": records}

    return asyncio.run(run())


async def _cancel_leftovers() -> None:
    """Cancel and await the tasks a peer left running after it closed.

    async-kinesis's ``Consumer.close`` waits for the shard fetches it knows of, but a fetch
    round already past its ``is_fetching`` check starts new ``get_records`` tasks after that,
    and nothing cancels them; once the client under them is closed, the garbage collector
    finds them pending and asyncio prints "Task was destroyed but it is pending!" after the
    run. Cancelled here, while the consumer still references them, they end quietly.
    """
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not current]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


def consume_boto3(target: LoadTarget, spec: ConsumeSpec, clock: Clock) -> dict[str, Any]:
    """A boto3 GetRecords loop over every shard, at most 5 calls/s a shard (the service's
    limit); aws-kinesis-agg unpacks aggregates. EFO is attempted and reported."""
    if spec.mode == "efo":
        _boto3_subscribe(target)
    client = boto3_client(target)
    stream = target.stream_name
    clock.start()
    shards = client.list_shards(StreamName=stream)["Shards"]
    iterators = {
        shard["ShardId"]: client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for shard in shards
    }
    due = dict.fromkeys(iterators, 0.0)
    records = 0
    if spec.aggregated:
        from aws_kinesis_agg.deaggregator import iter_deaggregate_records  # noqa: PLC0415
    while records < spec.count:
        shard = min(due, key=due.__getitem__)
        time.sleep(max(0.0, due[shard] - time.perf_counter()))
        due[shard] = time.perf_counter() + 0.2
        answer = client.get_records(ShardIterator=iterators[shard], Limit=spec.max_records_per_call)
        iterators[shard] = answer["NextShardIterator"]
        if spec.aggregated:
            records += sum(1 for _ in iter_deaggregate_records(answer["Records"], "Boto3"))
        else:
            records += len(answer["Records"])
    clock.stop()
    return {"records": records}


def _boto3_subscribe(target: LoadTarget) -> None:
    """Try boto3's ``subscribe_to_shard`` against the target; raise Unsupported with why."""
    import boto3  # noqa: PLC0415 - optional peer

    client = boto3.client(
        "kinesis",
        region_name=REGION,
        endpoint_url=target.tls_endpoint_url,
        verify=target.ca_file,
        aws_access_key_id=CREDENTIALS[0],
        aws_secret_access_key=CREDENTIALS[1],
    )
    try:
        arn = client.register_stream_consumer(StreamARN=target.stream_arn, ConsumerName="boto3")[
            "Consumer"
        ]["ConsumerARN"]
        answer = client.subscribe_to_shard(
            ConsumerARN=arn,
            ShardId=target.shard_ids()[0],
            StartingPosition={"Type": "TRIM_HORIZON"},
        )
        for _event in answer["EventStream"]:
            break
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code") or type(exc).__name__
        raise Unsupported(
            "boto3 subscribe_to_shard: botocore speaks HTTP/1.1 only, SubscribeToShard needs "
            f"HTTP/2 (the target answered {code})"
        ) from exc
    raise Unsupported("boto3 subscribe_to_shard answered, but the EFO loop is not benchmarked")


@dataclass(frozen=True, slots=True)
class ConsumerPeer:
    """A consumer in the comparison: ``consume`` runs one row; ``note`` goes into the table."""

    name: str
    consume: Callable[[LoadTarget, ConsumeSpec, Clock], dict[str, Any]]
    note: str


CONSUMERS = [
    ConsumerPeer(PROJECT, consume_project, "Consumer; polling at 5 calls/s, byte budget lifted"),
    ConsumerPeer(
        "async-kinesis",
        consume_async_kinesis,
        "kinesis.Consumer, shard_fetch_rate=5, raw bytes",
    ),
    ConsumerPeer("boto3", consume_boto3, "get_records loop, 5 calls/s a shard"),
]
