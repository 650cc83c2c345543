"""The source's driver and executor sides without a Spark session, against the local server.

Spark calls ``latestOffset``, ``partitions`` and ``read`` exactly as these tests do (the
driver's methods in one long-lived process, ``read`` in a worker on an unpickled partition),
so the planner, the offsets and the range reader are checked here in seconds, including
through the fault proxy, while test_source.py runs the real engine.
"""

from __future__ import annotations

import json
import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

import spark_bridge._planner as planner_module
import spark_bridge._source as source_module
from kinesis_actors import LocalKinesis
from kinesis_actors.errors import ConfigError, PositionsMismatchError, ShardUnreadableError
from kinesis_actors.records import deaggregate
from spark_bridge._idle import IdleProbes
from spark_bridge._options import parse_source_options
from spark_bridge._source import KinesisStreamReader
from tests.boto import boto3_kinesis, create_stream, read_back
from tests.faults import FaultProxy, Reply, Request, garbled

pytestmark = pytest.mark.local_kinesis

Row = tuple[str, str, int, bytes]  # shard, sequence, sub-sequence, data


@pytest.fixture(autouse=True)
def _plan_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans are paced to two a second for Spark's 10 ms polling; tests call on purpose."""
    monkeypatch.setattr(source_module, "_MIN_PLAN_INTERVAL", 0.0)


def make_reader(endpoint: str, stream: str, **extra: str) -> KinesisStreamReader:
    options = {
        "streamName": stream,
        "endpointUrl": endpoint,
        "awsAccessKeyId": "local",
        "awsSecretKey": "local",
        **extra,
    }
    return KinesisStreamReader(parse_source_options(options))


def put_plain(local: LocalKinesis, stream: str, datas: list[bytes], key: str = "k") -> list[str]:
    """Unaggregated records, one call; their sequence numbers."""
    answer = boto3_kinesis(local).put_records(
        StreamName=stream, Records=[{"Data": data, "PartitionKey": key} for data in datas]
    )
    assert answer["FailedRecordCount"] == 0
    return [entry["SequenceNumber"] for entry in answer["Records"]]


def read_all(reader: KinesisStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[Row]:
    """What the executors would read for the micro-batch (start, end): partitions pickled
    and unpickled, as Spark ships them."""
    worker = pickle.loads(pickle.dumps(reader))
    rows: list[Row] = []
    for partition in reader.partitions(start, end):
        shipped = pickle.loads(pickle.dumps(partition))
        for batch in worker.read(shipped):
            table = batch.to_pydict()
            rows.extend(
                zip(
                    table["shardId"],
                    table["sequenceNumber"],
                    table["subSequenceNumber"],
                    table["data"],
                    strict=True,
                )
            )
    return rows


def drain(
    reader: KinesisStreamReader, start: dict[str, Any], limit: ReadLimit | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any], list[Row]]]:
    """Every micro-batch of an AvailableNow run from ``start``: (start, end, rows)."""
    reader.prepareForTriggerAvailableNow()
    for _ in range(200):
        end = reader.latestOffset(start, limit or ReadAllAvailable())
        if end == start:
            return
        yield start, end, read_all(reader, start, end)
        start = end
    raise AssertionError("AvailableNow did not end")


def test_an_old_checkpoint_replays_its_last_batch_and_resumes_under_the_new_source(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    sequences = put_plain(local_kinesis, stream_name, [b"r%d" % i for i in range(10)])
    shard = boto3_kinesis(local_kinesis).list_shards(StreamName=stream_name)["Shards"][0]["ShardId"]
    # Version 1: what the source wrote before the executors read (the consumer's positions).
    old_start = {
        "version": 1,
        "streams": {stream_name: {shard: {"start": {"type": "TRIM_HORIZON"}}}},
    }
    old_end = {
        "version": 1,
        "streams": {
            stream_name: {shard: {"sequence_number": sequences[3], "sub_sequence_number": 0}}
        },
    }
    reader = make_reader(local_kinesis.endpoint_url, stream_name)
    try:
        replayed = read_all(reader, old_start, old_end)
        assert [row[3] for row in replayed] == [b"r%d" % i for i in range(4)]
        batches = list(drain(reader, old_end))
        assert [row[3] for _, _, rows in batches for row in rows] == [
            b"r%d" % i for i in range(4, 10)
        ]
        newest = batches[-1][1]
        assert newest["version"] == 2 and "arn" in newest["streams"][stream_name]
        with pytest.raises(ConfigError, match="new checkpointLocation"):
            reader.latestOffset({"version": 7, "streams": {}}, ReadAllAvailable())
    finally:
        reader.stop()


def test_an_offset_of_a_re_created_stream_is_refused(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 1)
    put_plain(local_kinesis, stream_name, [b"a", b"b"])
    reader = make_reader(local_kinesis.endpoint_url, stream_name)
    try:
        (_, end, rows), *_ = drain(reader, reader.initialOffset())
        assert [row[3] for row in rows] == [b"a", b"b"]
    finally:
        reader.stop()
    kinesis.delete_stream(StreamName=stream_name)
    kinesis.get_waiter("stream_not_exists").wait(
        StreamName=stream_name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    create_stream(local_kinesis, stream_name, 1)
    again = make_reader(local_kinesis.endpoint_url, stream_name)
    try:
        with pytest.raises(PositionsMismatchError, match="deleted and created again"):
            again.latestOffset(end, ReadAllAvailable())
    finally:
        again.stop()


def test_a_partition_is_a_few_hundred_bytes_and_a_replay_reads_the_same_rows(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    put_plain(local_kinesis, stream_name, [b"x" * 100] * 50, key="a")
    put_plain(local_kinesis, stream_name, [b"y" * 100] * 500, key="b")
    reader = make_reader(local_kinesis.endpoint_url, stream_name)
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        end = reader.latestOffset(start, ReadAllAvailable())
        sizes = [len(pickle.dumps(p)) for p in reader.partitions(start, end)]
        first = read_all(reader, start, end)
        again = read_all(reader, start, end)
    finally:
        reader.stop()
    assert len(first) == 550
    assert again == first, "a second read of the same micro-batch gave other rows"
    assert len(sizes) == 2 and max(sizes) < 1024, sizes
    assert abs(sizes[0] - sizes[1]) < 16, "a partition's size depends on its rows"


def test_read_limits_cut_exactly_inside_aggregates_and_lose_nothing(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    from kinesis_actors import ProducerConfig
    from kinesis_actors.sync import SyncProducer

    create_stream(local_kinesis, stream_name, 2)
    with SyncProducer(
        stream_name,
        endpoint_url=local_kinesis.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ProducerConfig(linger=0.05, aggregation=True),
    ) as producer:
        for i in range(997):
            producer.put(b"v%04d" % i, f"key-{i % 13}")
        producer.flush()
    reader = make_reader(local_kinesis.endpoint_url, stream_name, maxRecordsPerTrigger="101")
    try:
        batches = list(drain(reader, reader.initialOffset(), ReadMaxRows(101)))
    finally:
        reader.stop()
    sizes = [len(rows) for _, _, rows in batches]
    assert max(sizes) <= 101 and sum(sizes) == 997, sizes
    assert min(sizes) > 0, "a micro-batch of nothing"
    # A cut at the last user record of each shard's last aggregate (what a limit leaves when
    # it falls there): at the tip, neither planner moves it, which would be a batch of nothing.
    shards = {}
    for shard_id, records in read_back(local_kinesis, stream_name).items():
        final = records[-1]
        count = len(deaggregate(final["Data"], final["PartitionKey"]))
        assert count > 1, "the last record is not an aggregate"
        shards[shard_id] = {
            "sequence_number": final["SequenceNumber"],
            "sub_sequence_number": count - 1,
        }
    last = {"version": 2, "streams": {stream_name: {"shards": shards}}}
    for limit in (ReadMaxRows(101), ReadAllAvailable()):
        again = make_reader(local_kinesis.endpoint_url, stream_name)
        try:
            assert again.latestOffset(last, limit) == last
        finally:
            again.stop()
    assert any(
        "sequence_number" in entry
        for _, end, _ in batches
        for entry in end["streams"][stream_name]["shards"].values()
    ), "no cut fell inside an aggregate"
    everything = sorted(row[3] for _, _, rows in batches for row in rows)
    assert everything == [b"v%04d" % i for i in range(997)]


def _faults_once(plan: dict[str, list[Reply]]) -> Any:
    """A proxy decision that answers each operation's listed faults once, in order."""
    lock = threading.Lock()

    def decide(request: Request) -> Reply | None:
        with lock:
            queue = plan.get(request.target)
            return queue.pop(0) if queue else None

    return decide


NOT_FOUND = Reply.error("ResourceNotFoundException", "Shard not found (injected)")


@pytest.mark.parametrize(
    "faults",
    [
        {"GetRecords": [garbled("empty"), garbled("truncated"), garbled("html")]},
        {"GetRecords": [NOT_FOUND], "GetShardIterator": [NOT_FOUND]},
        {"ListShards": [garbled("not-an-object")], "DescribeStreamSummary": [garbled("empty")]},
    ],
    ids=["garbled-get-records", "one-resource-not-found", "garbled-control-plane"],
)
def test_a_hostile_reply_never_finishes_an_open_shard_nor_loses_a_record(
    local_kinesis: LocalKinesis, stream_name: str, faults: dict[str, list[Reply]]
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    put_plain(local_kinesis, stream_name, [b"a%d" % i for i in range(30)], key="one")
    put_plain(local_kinesis, stream_name, [b"b%d" % i for i in range(30)], key="two")
    with FaultProxy(local_kinesis.plain_port, _faults_once(faults)) as proxy:
        reader = make_reader(proxy.endpoint_url, stream_name)
        try:
            batches = list(drain(reader, reader.initialOffset()))
        finally:
            reader.stop()
        assert sum(proxy.stats.faults.values()) >= 1, "no fault was injected"
    rows = [row for _, _, rows in batches for row in rows]
    assert sorted(row[3] for row in rows) == sorted(
        [b"a%d" % i for i in range(30)] + [b"b%d" % i for i in range(30)]
    )
    last = batches[-1][1]["streams"][stream_name]["shards"]
    assert len(last) == 2 and not any(entry.get("finished") for entry in last.values()), last


def test_executors_wait_at_the_tip_for_records_the_driver_saw(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    put_plain(local_kinesis, stream_name, [b"seen-%d" % i for i in range(20)])
    hidden = {"left": 0}

    def decide(request: Request) -> Reply | None:
        # While "hiding", GetRecords answers "nothing yet, at the tip" on the same iterator:
        # a visibility lag, as a replica that is behind would give.
        if request.target == "GetRecords" and hidden["left"] > 0:
            hidden["left"] -= 1
            iterator = request.json()["ShardIterator"]
            body = {"Records": [], "NextShardIterator": iterator, "MillisBehindLatest": 0}
            return Reply(200, json.dumps(body).encode())
        return None

    with FaultProxy(local_kinesis.plain_port, decide) as proxy:
        reader = make_reader(proxy.endpoint_url, stream_name)
        try:
            start = reader.initialOffset()
            reader.prepareForTriggerAvailableNow()
            end = reader.latestOffset(start, ReadAllAvailable())
            hidden["left"] = 4
            rows = read_all(reader, start, end)
        finally:
            reader.stop()
        assert hidden["left"] == 0 and proxy.stats.faults.get("reply-200", 0) == 4
    assert [row[3] for row in rows] == [b"seen-%d" % i for i in range(20)]


def test_an_idle_stream_costs_one_call_per_shard_per_trigger_and_plans_no_batch(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    create_stream(local_kinesis, stream_name, 4)
    with FaultProxy(local_kinesis.plain_port) as proxy:
        reader = make_reader(proxy.endpoint_url, stream_name, settleLag="200ms")
        try:
            start = reader.initialOffset()
            assert reader.latestOffset(start, ReadAllAvailable()) == start
            before = dict(proxy.stats.by_target)
            triggers = 5
            for _ in range(triggers):
                assert reader.latestOffset(start, ReadAllAvailable()) == start
            calls = {
                op: proxy.stats.by_target.get(op, 0) - before.get(op, 0)
                for op in proxy.stats.by_target
            }
            assert calls.get("GetRecords", 0) == 4 * triggers, calls
            assert calls.get("GetShardIterator", 0) == 0, calls
            assert calls.get("ListShards", 0) <= 1, calls

            # A record on one idle shard reaches the query within two triggers that are the
            # settle lag apart.
            put_plain(local_kinesis, stream_name, [b"lonely"])
            moved = []
            for _ in range(2):
                end = reader.latestOffset(start, ReadAllAvailable())
                moved.append(end != start)
                if end != start:
                    break
                time.sleep(0.25)  # the settle lag passes; there is no event to wait for
            assert moved[-1], moved
            assert [row[3] for row in read_all(reader, start, end)] == [b"lonely"]
            assert reader.reportLatestOffset() is not None
        finally:
            reader.stop()


def test_a_sequence_number_of_another_shard_is_an_error_naming_the_shard_never_a_finish(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    shards = [s["ShardId"] for s in kinesis.list_shards(StreamName=stream_name)["Shards"]]
    mine = {}
    for key in (f"k{i}" for i in range(40)):
        answer = kinesis.put_record(StreamName=stream_name, Data=b"x", PartitionKey=key)
        mine.setdefault(answer["ShardId"], answer["SequenceNumber"])
    assert set(mine) == set(shards)
    # A positions mix-up: the first shard's entry holds a sequence number of the second.
    mixed = {
        "version": 2,
        "streams": {
            stream_name: {
                "shards": {
                    shards[0]: {"before": mine[shards[1]]},
                    shards[1]: {"start": {"type": "TRIM_HORIZON"}},
                }
            }
        },
    }
    reader = make_reader(local_kinesis.endpoint_url, stream_name)
    try:
        with pytest.raises(ShardUnreadableError, match=shards[0]) as raised:
            for _ in drain(reader, mixed):
                pass
        assert raised.value.shard_id == shards[0]
        # The executor refuses the range too, naming the shard, instead of reading another.
        end = {**mixed, "streams": {stream_name: {"shards": {shards[0]: {"after": "9" * 56}}}}}
        with pytest.raises(Exception, match=shards[0]):
            read_all(reader, mixed, end)
    finally:
        reader.stop()


def test_many_moved_shards_share_tasks_idle_ones_get_none_and_a_replay_regroups_the_same(
    local_kinesis: LocalKinesis, stream_name: str
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 40)
    shards = kinesis.list_shards(StreamName=stream_name)["Shards"]
    busy = shards[:36]  # four shards stay idle
    kinesis.put_records(
        StreamName=stream_name,
        Records=[
            {
                "Data": shard["ShardId"].encode(),
                "PartitionKey": "k",
                "ExplicitHashKey": shard["HashKeyRange"]["StartingHashKey"],
            }
            for shard in busy
        ],
    )
    expected = sorted(shard["ShardId"].encode() for shard in busy)
    for extra, tasks in (({}, 18), ({"shardsPerTask": "10"}, 4)):
        reader = make_reader(local_kinesis.endpoint_url, stream_name, **extra)
        try:
            start = reader.initialOffset()
            reader.prepareForTriggerAvailableNow()
            end = reader.latestOffset(start, ReadAllAvailable())
            parts = reader.partitions(start, end)
            again = pickle.loads(pickle.dumps(reader)).partitions(start, end)
            rows = read_all(reader, start, end)
        finally:
            reader.stop()
        assert len(parts) == tasks, extra
        assert [p.ranges for p in again] == [p.ranges for p in parts]  # type: ignore[attr-defined]
        assert sorted(row[3] for row in rows) == expected


def test_idle_shards_past_the_free_ones_are_probed_less_but_available_now_probes_them_all(
    local_kinesis: LocalKinesis, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planner_module, "IdleProbes", lambda: IdleProbes(rate=1, free=2))
    create_stream(local_kinesis, stream_name, 10)
    with FaultProxy(local_kinesis.plain_port) as proxy:
        reader = make_reader(proxy.endpoint_url, stream_name)
        try:
            start = reader.initialOffset()
            assert reader.latestOffset(start, ReadAllAvailable()) == start  # all found idle
            before = proxy.stats.by_target.get("GetRecords", 0)
            assert reader.latestOffset(start, ReadAllAvailable()) == start
            assert proxy.stats.by_target.get("GetRecords", 0) - before <= 1
            datas = [b"woke-%d" % index for index in range(20)]
            for index, data in enumerate(datas):
                put_plain(local_kinesis, stream_name, [data], key=f"key-{index}")
            # AvailableNow never skips a probe: its end sees every shard's tip.
            rows = [row for _, _, batch in drain(reader, start) for row in batch]
        finally:
            reader.stop()
    assert sorted(row[3] for row in rows) == sorted(datas)
