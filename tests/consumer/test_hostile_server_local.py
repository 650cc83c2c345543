"""The first promise: never lose an open shard (polling, through the fault proxy).

Each test injects one fault of the issue's part A between the consumer and the real local
server, then checks the promise: every record is delivered, or a typed error names the
shard; and ``positions()`` never says ``finished`` for an open shard. Tests are named after
the lesson they replay (``docs/consumer.md``, "A hostile server").
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from kinesis_actors import ClientConfig, KinesisClient, LocalKinesis, errors
from kinesis_actors.client import RetryPolicy, RetrySettings
from kinesis_actors.consumer import Consumer, ConsumerConfig, StartingPosition
from tests.faults import GARBLED_BODIES, Fault, FaultProxy, Reply, Request, Rewrite, garbled

from .helpers import Row, consume, put_plain

pytestmark = pytest.mark.anyio

SHARDS, RECORDS = 2, 20
#: Every garbled 2xx body of the fault proxy (the client makes each a MalformedReplyError;
#: the consumer checks what it uses again, so it would be proof against a ``{}`` too).
KINDS = tuple(GARBLED_BODIES)


class Script:
    """A proxy ``decide``: the n-th call of an operation (1-based) gets ``faults[(op, n)]``;
    ``always`` gives every call of an operation the same fault."""

    def __init__(
        self,
        faults: dict[tuple[str, int], Fault] | None = None,
        always: dict[str, Fault] | None = None,
    ) -> None:
        self.faults = faults or {}
        self.always = always or {}
        self.calls: Counter[str] = Counter()

    def __call__(self, request: Request) -> Fault:
        self.calls[request.target] += 1
        if request.target in self.always:
            return self.always[request.target]
        return self.faults.get((request.target, self.calls[request.target]))


def fast(**options: Any) -> ConsumerConfig:
    """Trim horizon, short backoffs, discovery every 0.2 s: faults cost little time."""
    settings: dict[str, Any] = {
        "start": StartingPosition.trim_horizon(),
        "shard_discovery_interval": 0.2,
        "idle_backoff_initial": 0.02,
        "idle_backoff_max": 0.05,
        "throttle_backoff_initial": 0.02,
        "throttle_backoff_max": 0.05,
        "max_records_per_call": 5,
        **options,
    }
    return ConsumerConfig(**settings)


@pytest.fixture
async def proxied(proxy: FaultProxy, local_kinesis: LocalKinesis) -> AsyncIterator[KinesisClient]:
    """A client through the proxy that does not retry the consumer's reads itself, so the
    consumer meets every injected fault."""
    once = RetrySettings(max_retries=0)
    overrides = {op: once for op in ("GetRecords", "GetShardIterator", "ListShards")}
    async with KinesisClient(
        region=local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(retry=RetryPolicy(overrides=overrides)),
    ) as client:
        yield client


async def setup(client: KinesisClient, stream: str, count: int = RECORDS) -> list[bytes]:
    await client.create_stream(stream, SHARDS)
    data = [b"r%03d" % i for i in range(count)]
    await put_plain(client, stream, [(item, f"k{i}") for i, item in enumerate(data)])
    return data


def check_positions(positions: dict[str, Any], stream: str, seen: list[Row]) -> None:
    """No open shard is finished; every shard's position is its last delivered record."""
    entries = positions["streams"][stream]
    assert len(entries) == SHARDS, entries
    last: dict[str, str] = {}
    for row in seen:
        last[row.shard_id] = max(last.get(row.shard_id, "0"), row.sequence_number, key=int)
    for shard_id, entry in entries.items():
        assert not entry.get("finished"), (shard_id, entry)
        if shard_id in last:
            assert entry["sequence_number"] == last[shard_id], (shard_id, entry)


async def read_everything(
    client: KinesisClient, stream: str, expected: list[bytes], config: ConsumerConfig
) -> tuple[dict[str, Any], dict[str, Any]]:
    async with Consumer(client, stream, config) as consumer:
        with anyio.fail_after(30):
            seen = await consume(consumer, len(expected))
        positions, metrics = consumer.positions(), consumer.statistics()
    assert sorted(row.data for row in seen) == expected
    check_positions(positions, stream, seen)
    return positions, metrics


@pytest.mark.parametrize("operation", ["GetRecords", "GetShardIterator"])
async def test_a_garbled_reply_on_a_read_is_retried_and_no_shard_ends(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str, operation: str
) -> None:
    """Each garbled 2xx once (the first calls): before the replies were checked the first one
    marked an open shard finished and its records were never delivered."""
    proxy.decide = Script({(operation, 1 + n): garbled(kind) for n, kind in enumerate(KINDS)})
    expected = await setup(proxied, stream_name)
    _, metrics = await read_everything(proxied, stream_name, expected, fast())
    assert proxy.stats.faults["reply-200"] == len(KINDS)
    shards = metrics.shards.values()
    assert sum(shard.transient_errors for shard in shards) == len(KINDS)
    assert all(shard.state != "finished" for shard in shards)


async def test_a_garbled_periodic_list_shards_is_a_warning_not_a_crash(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the replies were checked a ``{}`` from a later ListShards killed the consumer
    with a bare ``KeyError('Shards')``. Now a failed round is a warning and the next round
    retries."""
    proxy.decide = Script({("ListShards", 2 + n): garbled(kind) for n, kind in enumerate(KINDS)})
    expected = await setup(proxied, stream_name)
    config = fast(max_records_per_call=1, idle_backoff_initial=0.1, idle_backoff_max=0.1)
    with caplog.at_level(logging.WARNING, "kinesis_actors.consumer"):
        async with Consumer(proxied, stream_name, config) as consumer:
            with anyio.fail_after(30):
                while consumer.statistics().discoveries < 2:  # a round after the garbled ones
                    await anyio.sleep(0.05)
                seen = await consume(consumer, len(expected))
            positions, metrics = consumer.positions(), consumer.statistics()
    assert sorted(row.data for row in seen) == expected
    check_positions(positions, stream_name, seen)
    assert metrics.discovery_failures == len(KINDS)
    assert "shard discovery failed" in caplog.text and "ListShards" in caplog.text


async def test_a_garbled_list_shards_at_open_is_retried(
    proxy: FaultProxy, local_kinesis: LocalKinesis, stream_name: str
) -> None:
    """Each garbled body once on the ListShards at open (before: an ExceptionGroup of
    KeyError); the client retries it like a 5xx (fast retries here) and nothing is lost."""
    script = Script({("ListShards", 1 + n): garbled(kind) for n, kind in enumerate(KINDS)})
    retry = RetrySettings(max_retries=len(KINDS), base=0.01, max=0.02)
    async with KinesisClient(
        region=local_kinesis.region,
        endpoint_url=proxy.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ClientConfig(retry=RetryPolicy(overrides={"ListShards": retry})),
    ) as client:
        expected = await setup(client, stream_name)
        proxy.decide = script
        await read_everything(client, stream_name, expected, fast())
    assert proxy.stats.faults["reply-200"] == len(KINDS)


async def test_list_shards_garbled_for_good_at_open_is_a_typed_error(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str
) -> None:
    """At open, a ListShards that never gives a believable answer: MalformedReplyError
    naming ListShards (before: an ExceptionGroup of KeyError)."""
    await setup(proxied, stream_name, count=1)
    proxy.decide = Script(always={"ListShards": garbled("empty")})
    with anyio.fail_after(30), pytest.raises(errors.MalformedReplyError) as caught:
        async with Consumer(proxied, stream_name, fast()):
            pass
    assert caught.value.operation == "ListShards"


async def test_periodic_discovery_failing_for_good_fails_the_consumer(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str
) -> None:
    """Five failed rounds in a row: the consumer stops with the cause instead of going on
    quietly without seeing its stream's new shards."""
    await setup(proxied, stream_name, count=1)
    script = Script()
    proxy.decide = script
    async with Consumer(proxied, stream_name, fast()) as consumer:
        script.always["ListShards"] = garbled("html")
        with anyio.fail_after(30), pytest.raises(errors.MalformedReplyError) as caught:
            async for batch in consumer:
                consumer.commit(batch)
        assert consumer.statistics().discovery_failures == 5
    assert caught.value.operation == "ListShards"


@pytest.mark.parametrize("operation", ["GetRecords", "GetShardIterator"])
async def test_one_resource_not_found_on_a_read_does_not_end_the_shard(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str, operation: str
) -> None:
    """Before: every ResourceNotFound was "the shard expired"; 0 of its records delivered."""
    proxy.decide = Script({(operation, 2): Reply.error("ResourceNotFoundException")})
    expected = await setup(proxied, stream_name)
    _, metrics = await read_everything(proxied, stream_name, expected, fast())
    assert sum(shard.not_found for shard in metrics.shards.values()) == 1


def without_shard(shard_id: str) -> Rewrite:
    """A ListShards reply as if ``shard_id`` had expired (left the list)."""

    def transform(body: bytes) -> bytes:
        reply = json.loads(body)
        reply["Shards"] = [shard for shard in reply["Shards"] if shard["ShardId"] != shard_id]
        return json.dumps(reply).encode()

    return Rewrite(transform)


async def test_resource_not_found_on_a_shard_no_longer_listed_is_its_end(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str
) -> None:
    """The legitimate case: ResourceNotFound and the shard gone from ListShards (expired).
    The shard ends quietly, leaves the positions and the other shard is read."""
    gone = "shardId-000000000000"

    def decide(request: Request) -> Fault:
        listing = request.target == "ListShards"
        script.calls[request.target] += 1
        if listing and script.calls["ListShards"] > 1:
            return without_shard(gone)
        if request.target == "GetShardIterator" and request.json()["ShardId"] == gone:
            return Reply.error("ResourceNotFoundException")
        return None

    script = Script()
    expected = await setup(proxied, stream_name)
    proxy.decide = decide  # the consumer's open lists both shards, later rounds one
    async with Consumer(proxied, stream_name, fast()) as consumer:
        key = (stream_name, gone)
        with anyio.fail_after(30):
            while getattr(consumer.statistics().shards.get(key), "state", None) != "finished":
                await anyio.sleep(0.05)
            seen = await consume(consumer, 1)
            while gone in consumer.positions()["streams"][stream_name]:
                await anyio.sleep(0.05)
        shards = consumer.positions()["streams"][stream_name]
    assert list(shards) == ["shardId-000000000001"]
    assert {row.shard_id for row in seen} == {"shardId-000000000001"}
    assert len(expected) == RECORDS


async def test_an_open_shard_that_stays_not_found_is_a_typed_error_naming_it(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str
) -> None:
    """ResourceNotFound on every GetRecords while ListShards lists the shard: after a few
    paced retries, ShardUnreadableError naming stream, shard and position; never finished."""
    proxy.decide = Script(always={"GetRecords": Reply.error("ResourceNotFoundException")})
    await setup(proxied, stream_name)
    async with Consumer(proxied, stream_name, fast()) as consumer:
        with anyio.fail_after(30), pytest.raises(errors.ShardUnreadableError) as caught:
            await consume(consumer, 1)
        positions = consumer.positions()
        state = consumer.statistics().shards[(stream_name, caught.value.shard_id)].state
    error = caught.value
    assert error.stream == stream_name and error.shard_id.startswith("shardId-")
    assert error.position == "TRIM_HORIZON"
    assert stream_name in str(error) and error.shard_id in str(error)
    assert positions["streams"][stream_name][error.shard_id] == {"start": {"type": "TRIM_HORIZON"}}
    assert state == "failed"


async def test_expired_iterator_recovery_is_paced_and_loses_nothing(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str
) -> None:
    """Every GetRecords answered ExpiredIterator for 3 s, one shard: GetShardIterator calls
    per second stay within the service's 5 (before the recovery was paced: 91-108/s, no
    backoff). Then the fault lifts and every record arrives."""
    await proxied.create_stream(stream_name, 1)
    expected = [b"r%03d" % i for i in range(RECORDS)]
    await put_plain(proxied, stream_name, [(item, "k") for item in expected])
    script = Script(always={"GetRecords": Reply.error("ExpiredIteratorException")})
    proxy.decide = script
    window = 3.0
    async with Consumer(proxied, stream_name, fast()) as consumer:
        first = script.calls["GetShardIterator"]
        await anyio.sleep(window)  # the measurement window itself
        calls = script.calls["GetShardIterator"] - first
        del script.always["GetRecords"]
        with anyio.fail_after(30):
            seen = await consume(consumer, len(expected))
        expired = consumer.statistics().shards[(stream_name, "shardId-000000000000")]
    assert 2 <= calls <= 5 * window, calls
    assert expired.expired_iterators >= calls
    assert [row.data for row in seen] == expected


async def read_and_save(client: KinesisClient, stream: str, count: int) -> dict[str, Any]:
    async with Consumer(client, stream, fast()) as consumer:
        with anyio.fail_after(30):
            await consume(consumer, count)
        return consumer.positions()


async def test_positions_of_a_re_created_stream_are_refused_with_a_way_out(
    client: KinesisClient, stream_name: str
) -> None:
    """A document of a stream deleted and created again under its name (before: its shards
    "finished", 0 of 20 new records). Refused at open; started fresh, all 20 arrive."""
    await setup(client, stream_name, count=4)
    saved = await read_and_save(client, stream_name, 4)
    identity = saved["identity"][stream_name]
    assert identity["arn"].endswith(f"/{stream_name}") and identity["created"]
    await client.delete_stream(stream_name)
    expected = await setup(client, stream_name)
    with pytest.raises(errors.PositionsMismatchError) as caught:
        async with Consumer(client, stream_name, fast(positions=saved)):
            pass
    message = str(caught.value)
    assert "created again" in message and "leave ConsumerConfig.positions out" in message
    await read_everything(client, stream_name, expected, fast())


async def test_positions_of_another_stream_are_refused(
    client: KinesisClient, stream_name: str
) -> None:
    other = f"{stream_name}-other"
    await setup(client, stream_name, count=1)
    await client.create_stream(other, 1)
    saved = await read_and_save(client, stream_name, 1)
    mixed_up = {
        "version": 1,
        "streams": {other: {}},
        "identity": {other: saved["identity"][stream_name]},
    }
    with pytest.raises(errors.PositionsMismatchError, match=f"is arn:.*/{other}"):
        async with Consumer(client, other, fast(positions=mixed_up)):
            pass


async def test_a_document_without_identity_still_loads_and_resumes(
    client: KinesisClient, stream_name: str
) -> None:
    expected = await setup(client, stream_name)
    saved = await read_and_save(client, stream_name, RECORDS)
    del saved["identity"]  # a document written before positions knew their stream
    await put_plain(client, stream_name, [(b"late", "k0")])
    async with Consumer(client, stream_name, fast(positions=saved)) as consumer:
        with anyio.fail_after(30):
            seen = await consume(consumer, 1)
        assert "identity" in consumer.positions()
    assert [row.data for row in seen] == [b"late"] and len(expected) == RECORDS


async def test_a_foreign_sequence_number_is_a_typed_error_naming_both(
    client: KinesisClient, stream_name: str
) -> None:
    """A document that gives shard 0 a sequence number of shard 1: the server answers
    ResourceNotFound; before, 0 of that shard's records were ever delivered, silently."""
    await setup(client, stream_name)
    saved = await read_and_save(client, stream_name, RECORDS)
    shards = saved["streams"][stream_name]
    first, second = sorted(shards)
    foreign = shards[second]["sequence_number"]
    shards[first] = dict(shards[second])
    async with Consumer(client, stream_name, fast(positions=saved)) as consumer:
        with anyio.fail_after(30), pytest.raises(errors.ShardUnreadableError) as caught:
            await consume(consumer, 1)
        after = consumer.positions()["streams"][stream_name]
    error = caught.value
    assert (error.stream, error.shard_id) == (stream_name, first)
    assert foreign in str(error) and first in str(error)
    assert after[first] == {"sequence_number": foreign, "sub_sequence_number": 0}


async def test_invalid_argument_for_a_resumed_sequence_number_names_both(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str
) -> None:
    """Real Kinesis may answer a sequence number of another shard with InvalidArgument (the
    local server says ResourceNotFound): the same typed error, at once."""
    await setup(proxied, stream_name)
    saved = await read_and_save(proxied, stream_name, RECORDS)
    proxy.decide = Script(always={"GetShardIterator": Reply.error("InvalidArgumentException")})
    async with Consumer(proxied, stream_name, fast(positions=saved)) as consumer:
        with anyio.fail_after(30), pytest.raises(errors.ShardUnreadableError) as caught:
            await consume(consumer, 1)
        after = consumer.positions()["streams"][stream_name]
    error = caught.value
    committed = saved["streams"][stream_name][error.shard_id]["sequence_number"]
    assert error.position == f"AT_SEQUENCE_NUMBER {committed}" and error.shard_id in str(error)
    assert after == saved["streams"][stream_name]


async def test_under_run_an_unreadable_shard_raises_itself_from_run(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str
) -> None:
    """Under ``run(handler)`` the typed error comes out of ``run`` as itself: not restarted
    into an anonymous RestartIntensityExceeded."""
    proxy.decide = Script(always={"GetRecords": Reply.error("ResourceNotFoundException")})
    await setup(proxied, stream_name, count=2)
    handled: list[int] = []

    async def handler(batch: Any) -> None:
        handled.append(len(batch))

    async with Consumer(proxied, stream_name, fast()) as consumer:
        with anyio.fail_after(30), pytest.raises(errors.ShardUnreadableError):
            await consumer.run(handler)
        positions = consumer.positions()["streams"][stream_name]
    assert handled == []
    assert all(entry == {"start": {"type": "TRIM_HORIZON"}} for entry in positions.values())


async def test_commit_takes_only_this_consumers_batches(
    client: KinesisClient, stream_name: str
) -> None:
    """another consumer's batch of the same stream is refused (before, it
    moved this consumer's position past records it never delivered)."""
    await setup(client, stream_name, count=4)
    async with (
        Consumer(client, stream_name, fast()) as mine,
        Consumer(client, stream_name, fast()) as theirs,
    ):
        with anyio.fail_after(30):
            batch = await theirs.__anext__()
        before = mine.positions()
        with pytest.raises(errors.ValidationError, match="only this consumer's batches"):
            mine.commit(batch)
        with pytest.raises(errors.ValidationError):
            mine.commit(batch.slice(0, 1))
        assert mine.positions() == before
        theirs.commit(batch)  # its own consumer takes it


async def test_iterating_a_closed_consumer_raises_consumer_closed_error(
    client: KinesisClient, stream_name: str
) -> None:
    """before, iterating a closed consumer yielded nothing, silently."""
    await setup(client, stream_name, count=1)
    consumer = Consumer(client, stream_name, fast())
    async with consumer:
        pass
    with pytest.raises(errors.ConsumerClosedError):
        async for _ in consumer:
            pass
    with pytest.raises(errors.ConsumerClosedError):
        await consumer.run(lambda batch: anyio.lowlevel.checkpoint())


class Poison:
    """A ``Rewrite`` transform: in GetRecords replies with records, record ``index`` is
    broken (``how``: its ``Data`` removed, or not base64), ``times`` replies, then the
    server's answers pass untouched. The client reports both in
    ``MalformedReplyError.bad_records``."""

    def __init__(self, how: str = "no-data", index: int = 1, times: int = 1_000_000) -> None:
        self.how, self.index, self.times = how, index, times
        self.sequence_numbers: list[str] = []

    def __call__(self, body: bytes) -> bytes:
        reply = json.loads(body)
        records = reply.get("Records") or []
        if len(records) <= self.index or self.times == 0:
            return body
        self.times -= 1
        self.sequence_numbers.append(records[self.index]["SequenceNumber"])
        if self.how == "no-data":
            del records[self.index]["Data"]
        else:
            records[self.index]["Data"] = "!not base64!"
        return json.dumps(reply).encode()


@pytest.mark.parametrize("how", ["no-data", "bad-base64"])
async def test_a_poison_record_fails_naming_it_and_the_position_stays_before_it(
    proxy: FaultProxy, proxied: KinesisClient, stream_name: str, how: str
) -> None:
    """The default poison policy, with the same bad record in every reply: a
    PoisonRecordError naming stream, shard, sequence number and index (before: a KeyError,
    then an anonymous RestartIntensityExceeded); nothing skipped."""
    poison = Poison(how)
    proxy.decide = lambda request: Rewrite(poison) if request.target == "GetRecords" else None
    await proxied.create_stream(stream_name, 1)
    await put_plain(proxied, stream_name, [(b"r%03d" % i, "k") for i in range(10)])
    async with Consumer(proxied, stream_name, fast()) as consumer:
        with anyio.fail_after(30), pytest.raises(errors.PoisonRecordError) as caught:
            await consume(consumer, 10)
        positions = consumer.positions()["streams"][stream_name]
        metrics = consumer.statistics().shards[(stream_name, "shardId-000000000000")]
    error = caught.value
    assert (error.stream, error.shard_id) == (stream_name, "shardId-000000000000")
    assert (error.sequence_number, error.index) == (poison.sequence_numbers[0], 1)
    assert positions == {"shardId-000000000000": {"start": {"type": "TRIM_HORIZON"}}}
    assert metrics.state == "failed" and metrics.restarts == 0


@pytest.mark.parametrize("how", ["no-data", "bad-base64"])
async def test_a_poison_record_is_skipped_counted_and_named_when_asked(
    proxy: FaultProxy,
    proxied: KinesisClient,
    stream_name: str,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    poison = Poison(how, times=1)
    proxy.decide = lambda request: Rewrite(poison) if request.target == "GetRecords" else None
    await proxied.create_stream(stream_name, 1)
    written = [b"r%03d" % i for i in range(10)]
    await put_plain(proxied, stream_name, [(item, "k") for item in written])
    with caplog.at_level(logging.WARNING, "kinesis_actors.consumer"):
        async with Consumer(proxied, stream_name, fast(poison_records="skip")) as consumer:
            with anyio.fail_after(30):
                seen = await consume(consumer, 9)
            positions = consumer.positions()["streams"][stream_name]
            metrics = consumer.statistics().shards[(stream_name, "shardId-000000000000")]
    assert [row.data for row in seen] == written[:1] + written[2:]
    assert metrics.poison_records == 1
    assert poison.sequence_numbers[0] in caplog.text and "skipping" in caplog.text
    assert positions["shardId-000000000000"]["sequence_number"] == seen[-1].sequence_number
