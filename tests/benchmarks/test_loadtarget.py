"""The load target against the real kinesis-actors client, on asyncio and trio.

Most targets run in threads (cheap to start); one module-wide target runs in its own
process, as benchmarks run it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterator
from hashlib import md5
from typing import Any

import anyio
import pytest

from benchmarks.loadtarget import Faults, Limits, LoadTarget, Synthetic
from kinesis_actors import errors
from kinesis_actors.client import ClientConfig, KinesisClient, RetryPolicy, RetrySettings

pytestmark = pytest.mark.anyio

#: Fast retries, so fault tests do not sleep for seconds.
FAST_RETRY = ClientConfig(retry=RetryPolicy(default=RetrySettings(10, 0.005, 0.02)))
NO_RETRY = RetrySettings(max_retries=0)


@pytest.fixture(scope="module")
def target() -> Iterator[LoadTarget]:
    """A process of its own, keeping what is put (shared by the tests of this module)."""
    with LoadTarget(shards=4, retain_records=10_000) as server:
        yield server


@pytest.fixture
async def client(target: LoadTarget) -> AsyncIterator[KinesisClient]:
    async with target.client() as kinesis:
        yield kinesis


def _records(count: int, prefix: str, size: int = 20) -> list[dict[str, Any]]:
    return [
        {"Data": f"{prefix}-{i}".encode().ljust(size, b"."), "PartitionKey": f"{prefix}-{i}"}
        for i in range(count)
    ]


async def _read_shard(client: KinesisClient, shard_id: str, start: str) -> list[dict[str, Any]]:
    iterator = (
        await client.call(
            "GetShardIterator",
            {
                "StreamName": "bench",
                "ShardId": shard_id,
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": start,
            },
        )
    )["ShardIterator"]
    records: list[dict[str, Any]] = []
    while True:
        answer = await client.call("GetRecords", {"ShardIterator": iterator, "Limit": 7})
        records.extend(answer["Records"])
        iterator = answer["NextShardIterator"]
        if not answer["Records"]:
            return records


async def test_put_records_round_trip(target: LoadTarget, client: KinesisClient) -> None:
    shards = (await client.call("ListShards", {"StreamName": "bench"}))["Shards"]
    ranges = {
        s["ShardId"]: (
            int(s["HashKeyRange"]["StartingHashKey"]),
            int(s["HashKeyRange"]["EndingHashKey"]),
        )
        for s in shards
    }
    starts = {s["ShardId"]: s["SequenceNumberRange"]["StartingSequenceNumber"] for s in shards}
    # Remember where each shard is now: the target is shared by the module's tests.
    before = {
        shard_id: await _read_shard(client, shard_id, starts[shard_id]) for shard_id in ranges
    }
    last = {k: v[-1]["SequenceNumber"] if v else starts[k] for k, v in before.items()}

    sent = _records(60, "round")
    sent.append({"Data": b"explicit", "PartitionKey": "x", "ExplicitHashKey": str(2**128 - 1)})
    answer = await client.call("PutRecords", {"StreamName": "bench", "Records": sent})
    assert answer["FailedRecordCount"] == 0
    results = answer["Records"]
    assert len(results) == len(sent)
    for record, result in zip(sent, results, strict=True):
        low, high = ranges[result["ShardId"]]
        if "ExplicitHashKey" in record:
            assert result["ShardId"] == shards[-1]["ShardId"]
        else:
            value = int.from_bytes(md5(record["PartitionKey"].encode()).digest(), "big")
            assert low <= value <= high

    for shard_id in ranges:
        mine = [(r, s) for r, s in zip(sent, results, strict=True) if s["ShardId"] == shard_id]
        sequences = [int(s["SequenceNumber"]) for _, s in mine]
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
        read = await _read_shard(client, shard_id, last[shard_id])
        assert [r["SequenceNumber"] for r in read] == [s["SequenceNumber"] for _, s in mine]
        assert [r["Data"] for r in read] == [r["Data"] for r, _ in mine]
        assert [r["PartitionKey"] for r in read] == [r["PartitionKey"] for r, _ in mine]

    single = await client.call(
        "PutRecord", {"StreamName": "bench", "Data": b"one", "PartitionKey": "p"}
    )
    assert single["ShardId"] in ranges and single["SequenceNumber"]


async def test_list_shards_pagination_and_filters() -> None:
    with LoadTarget(shards=7, tls=False, isolation="thread") as seven:
        async with seven.client() as kinesis:
            pages = []
            answer = await kinesis.call("ListShards", {"StreamName": "bench", "MaxResults": 3})
            pages.append(answer["Shards"])
            while "NextToken" in answer:
                answer = await kinesis.call(
                    "ListShards", {"NextToken": answer["NextToken"], "MaxResults": 3}
                )
                pages.append(answer["Shards"])
            assert [len(page) for page in pages] == [3, 3, 1]
            ids = [s["ShardId"] for page in pages for s in page]
            assert ids == seven.shard_ids()
            ranges = [
                (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
                for page in pages
                for s in page
            ]
            assert ranges[0][0] == 0 and ranges[-1][1] == 2**128 - 1
            assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))
            after = await kinesis.call(
                "ListShards",
                {
                    "StreamName": "bench",
                    "ShardFilter": {"Type": "AFTER_SHARD_ID", "ShardId": ids[4]},
                },
            )
            assert [s["ShardId"] for s in after["Shards"]] == ids[5:]
            exclusive = await kinesis.call(
                "ListShards", {"StreamName": "bench", "ExclusiveStartShardId": ids[0]}
            )
            assert [s["ShardId"] for s in exclusive["Shards"]] == ids[1:]
            summary = (await kinesis.call("DescribeStreamSummary", {"StreamName": "bench"}))[
                "StreamDescriptionSummary"
            ]
            assert summary["OpenShardCount"] == 7
            assert summary["StreamModeDetails"]["StreamMode"] == "PROVISIONED"
            with pytest.raises(errors.ResourceNotFoundError):
                await kinesis.call("DescribeStreamSummary", {"StreamName": "nope"})


async def test_subscribe_to_shard_over_http2(target: LoadTarget, client: KinesisClient) -> None:
    name = f"sub-{id(client)}"
    consumer = (
        await client.call(
            "RegisterStreamConsumer", {"StreamARN": target.stream_arn, "ConsumerName": name}
        )
    )["Consumer"]
    assert consumer["ConsumerStatus"] == "ACTIVE"
    described = await client.wait_for_consumer(consumer["ConsumerARN"])
    assert described["ConsumerName"] == name
    shard_id = target.shard_ids()[0]
    async with (
        target.client(tls=True) as tls_client,
        tls_client.subscribe_to_shard(
            consumer["ConsumerARN"], shard_id, {"Type": "LATEST"}
        ) as subscription,
    ):
        sent = [
            {"Data": f"live-{i}".encode(), "PartitionKey": "p", "ExplicitHashKey": "0"}
            for i in range(5)
        ]
        await client.call("PutRecords", {"StreamName": "bench", "Records": sent})
        received: list[bytes] = []
        with anyio.fail_after(10):
            async for event in subscription:
                received.extend(r["Data"] for r in event["Records"])
                assert event["ContinuationSequenceNumber"]
                if len(received) >= len(sent):
                    break
        assert received == [r["Data"] for r in sent]
        assert subscription.http_version == "HTTP/2"
        assert subscription.initial_response_seen
    with pytest.raises(errors.ResourceNotFoundError):
        async with (
            target.client(tls=True) as tls_client,
            tls_client.subscribe_to_shard(
                target.stream_arn + "/consumer/missing:1", shard_id, {"Type": "LATEST"}
            ),
        ):
            pass


async def test_subscription_honours_window_updates() -> None:
    """A 64 KiB window: more than a MiB arrives only if WINDOW_UPDATE frames are honoured."""
    synthetic = Synthetic(record_size=1000, records_per_event=100)
    with LoadTarget(shards=1, synthetic=synthetic, isolation="thread") as server:
        async with server.client() as kinesis:
            arn = (
                await kinesis.call(
                    "RegisterStreamConsumer", {"StreamARN": server.stream_arn, "ConsumerName": "w"}
                )
            )["Consumer"]["ConsumerARN"]
        small_window = ClientConfig(subscribe_window=65535)
        sequences: list[int] = []
        async with (
            server.client(tls=True, config=small_window) as kinesis,
            kinesis.subscribe_to_shard(
                arn, "shardId-000000000000", {"Type": "TRIM_HORIZON"}
            ) as sub,
        ):
            with anyio.fail_after(10):
                async for event in sub:
                    sequences.extend(int(r["SequenceNumber"]) for r in event["Records"])
                    assert all(len(r["Data"]) == 1000 for r in event["Records"])
                    if sub.bytes_received > 2**21:
                        break
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
        assert len(sequences) > 1000  # over 2 MiB through a 64 KiB window


async def test_unary_calls_over_http2() -> None:
    """PutRecords and GetRecords answers above 48 KiB, through httpx's HTTP/2."""
    with LoadTarget(shards=1, retain_records=2000, isolation="thread") as server:
        async with server.client(tls=True, config=ClientConfig(http2=True)) as kinesis:
            answer = await kinesis.call(
                "PutRecords", {"StreamName": "bench", "Records": _records(500, "h2", 200)}
            )
            assert answer["FailedRecordCount"] == 0
            iterator = (
                await kinesis.call(
                    "GetShardIterator",
                    {
                        "StreamName": "bench",
                        "ShardId": "shardId-000000000000",
                        "ShardIteratorType": "TRIM_HORIZON",
                    },
                )
            )["ShardIterator"]
            records = (await kinesis.call("GetRecords", {"ShardIterator": iterator}))["Records"]
            assert len(records) == 500
        async with server.client(tls=True) as kinesis:  # TLS, ALPN http/1.1
            summary = await kinesis.call("DescribeStreamSummary", {"StreamName": "bench"})
            assert summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE"
        connections = server.stats()["connections"]
        assert connections["h2"] >= 1 and connections["tls"] > connections["h2"]


async def test_synthetic_get_records() -> None:
    synthetic = Synthetic(record_size=64, records_per_call=300, partition_keys=10)
    with LoadTarget(shards=2, tls=False, synthetic=synthetic, isolation="thread") as server:
        async with server.client() as kinesis:
            iterator = (
                await kinesis.call(
                    "GetShardIterator",
                    {
                        "StreamName": "bench",
                        "ShardId": "shardId-000000000001",
                        "ShardIteratorType": "LATEST",
                    },
                )
            )["ShardIterator"]
            first = await kinesis.call("GetRecords", {"ShardIterator": iterator})
            second = await kinesis.call(
                "GetRecords", {"ShardIterator": first["NextShardIterator"], "Limit": 50}
            )
            assert len(first["Records"]) == 300 and len(second["Records"]) == 50
            sequences = [int(r["SequenceNumber"]) for r in first["Records"] + second["Records"]]
            assert sequences == list(range(sequences[0], sequences[0] + 350))
            assert {len(r["Data"]) for r in first["Records"]} == {64}
            assert len({r["PartitionKey"] for r in first["Records"]}) == 10


async def test_write_limits_fail_records_partially() -> None:
    """1,000 records/s and 1 MiB/s per shard, one second of burst, on a frozen clock."""
    with LoadTarget(
        shards=1, tls=False, limits=True, manual_clock=True, isolation="thread"
    ) as server:
        async with server.client() as kinesis:

            async def put(count: int, size: int) -> dict[str, Any]:
                records = [{"Data": b"x" * size, "PartitionKey": "k"} for _ in range(count)]
                return await kinesis.call("PutRecords", {"StreamName": "bench", "Records": records})

            assert (await put(500, 10))["FailedRecordCount"] == 0
            assert (await put(500, 10))["FailedRecordCount"] == 0
            answer = await put(10, 10)  # the record bucket is empty
            assert answer["FailedRecordCount"] == 10
            assert {r["ErrorCode"] for r in answer["Records"]} == {
                "ProvisionedThroughputExceededException"
            }
            assert "shardId-000000000000" in answer["Records"][0]["ErrorMessage"]
            server.advance_clock(0.1)  # 100 records' worth
            answer = await put(150, 10)
            assert answer["FailedRecordCount"] == 50
            assert all("SequenceNumber" in r for r in answer["Records"][:100])
            server.advance_clock(1.0)
            # Bytes: 1 MiB of burst; records of 100 KiB: 10 fit, then the byte bucket is dry.
            answer = await put(12, 100 * 1024)
            assert answer["FailedRecordCount"] == 2
            with pytest.raises(errors.ThrottlingError):
                await kinesis.call(
                    "PutRecord",
                    {"StreamName": "bench", "Data": b"y" * 30_000, "PartitionKey": "k"},
                    retry=NO_RETRY,
                )

            # Reads: 5 GetRecords calls per second per shard.
            iterator = (
                await kinesis.call(
                    "GetShardIterator",
                    {
                        "StreamName": "bench",
                        "ShardId": "shardId-000000000000",
                        "ShardIteratorType": "LATEST",
                    },
                )
            )["ShardIterator"]
            for _ in range(5):
                await kinesis.call("GetRecords", {"ShardIterator": iterator}, retry=NO_RETRY)
            with pytest.raises(errors.ThrottlingError):
                await kinesis.call("GetRecords", {"ShardIterator": iterator}, retry=NO_RETRY)
            server.advance_clock(0.2)
            await kinesis.call("GetRecords", {"ShardIterator": iterator}, retry=NO_RETRY)

        stats = server.stats()
        shard = stats["shards"]["shardId-000000000000"]
        assert shard["records_in"] == 1000 + 100 + 10
        assert shard["throttled"] == 10 + 50 + 2 + 1
        assert shard["read_throttled"] == 1
        rows = stats["series"]["shardId-000000000000"]
        assert [row[0] for row in rows] == [0, 1]  # the manual clock's seconds
        assert rows[0][1] == 1100 and rows[0][3] == 60  # accepted, throttled in second 0


async def test_injected_throttling_share() -> None:
    faults = Faults(throttle_share=0.3, seed=11)
    with LoadTarget(
        shards=2, tls=False, faults=faults, retain_records=1000, isolation="thread"
    ) as server:
        async with server.client() as kinesis:
            pending = _records(400, "share")
            rounds = 0
            failed_first = None
            while pending:
                answer = await kinesis.call(
                    "PutRecords", {"StreamName": "bench", "Records": pending}
                )
                if failed_first is None:
                    failed_first = answer["FailedRecordCount"]
                pending = [
                    r for r, s in zip(pending, answer["Records"], strict=True) if "ErrorCode" in s
                ]
                rounds += 1
            assert failed_first is not None and 80 <= failed_first <= 160
            assert rounds > 2
        stats = server.stats()
        assert stats["totals"]["records_in"] == 400
        assert stats["faults"]["throttled_records"] == stats["totals"]["throttled"]


async def test_cuts_and_errors_are_recovered_by_client_retries() -> None:
    faults = Faults(
        cut_share=0.25, cut_after_share=0.1, error_share=0.1, call_throttle_share=0.1, seed=5
    )
    with LoadTarget(shards=2, tls=False, faults=faults, isolation="thread") as server:
        async with server.client(config=FAST_RETRY) as kinesis:
            for index in range(30):
                answer = await kinesis.call(
                    "PutRecords", {"StreamName": "bench", "Records": _records(5, f"cut{index}")}
                )
                assert answer["FailedRecordCount"] == 0
            assert kinesis.statistics().transport_errors > 0
            assert kinesis.statistics().throttled > 0
        counts = server.stats()["faults"]
        assert counts["cut"] > 0 and counts["cut_after"] > 0 and counts["error"] > 0
        # A cut after processing stored the records: the retry duplicates them, as for real.
        assert server.stats()["totals"]["records_in"] == 5 * (30 + counts["cut_after"])
        server.set_faults(Faults(call_throttle_share=1.0, operations=("ListShards",)))
        async with server.client() as kinesis:
            with pytest.raises(errors.ThrottlingError):
                await kinesis.call("ListShards", {"StreamName": "bench"}, retry=NO_RETRY)
            await kinesis.call("DescribeStreamSummary", {"StreamName": "bench"})


async def test_pause_and_delay_stall_calls() -> None:
    with LoadTarget(shards=2, tls=False, retain_records=100, isolation="thread") as server:
        async with server.client() as kinesis:
            paused = "shardId-000000000001"
            server.pause(paused)
            key_for: dict[int, str] = {}
            for index in range(50):
                shard = int.from_bytes(md5(f"k{index}".encode()).digest(), "big") >> 127
                key_for.setdefault(shard, f"k{index}")
            done: list[str] = []

            async def put(key: str) -> None:
                await kinesis.call(
                    "PutRecord", {"StreamName": "bench", "Data": b"d", "PartitionKey": key}
                )
                done.append(key)

            async with anyio.create_task_group() as group:
                group.start_soon(put, key_for[1])
                with anyio.fail_after(5):
                    await put(key_for[0])  # the other shard is not stalled
                await anyio.sleep(0.2)
                assert done == [key_for[0]]
                server.resume(paused)
            assert done == [key_for[0], key_for[1]]

            server.set_faults(Faults(delay_seconds=0.3, operations=("ListShards",)))
            start = anyio.current_time()
            await kinesis.call("ListShards", {"StreamName": "bench"})
            assert anyio.current_time() - start >= 0.29
        assert server.stats()["faults"]["stalled"] == 1


async def test_target_cpu_is_measurable(target: LoadTarget, client: KinesisClient) -> None:
    before = target.cpu_seconds()
    for _ in range(20):
        await client.call("PutRecords", {"StreamName": "bench", "Records": _records(100, "cpu")})
    assert target.cpu_seconds() >= before
    assert target.pid is not None
    stats = target.stats()
    assert stats["requests"]["PutRecords"] >= 20
    assert stats["connections"]["opened"] >= 1


def test_thread_isolation_reports_its_own_cpu() -> None:
    """A server in a thread reports its thread's CPU: a busy loop of the test's own thread
    does not show in it (the bound is half the loop's time), and answering calls does."""
    with LoadTarget(shards=1, tls=False, isolation="thread") as server:
        assert server.pid is not None
        before = server.cpu_seconds()
        spin_until = time.thread_time() + 0.4
        while time.thread_time() < spin_until:
            pass
        assert server.cpu_seconds() - before < 0.2, "the caller's CPU was counted"

        async def calls() -> None:
            async with server.client() as kinesis:
                # Enough for many scheduler ticks: a thread's CPU is sampled at each tick.
                for _ in range(2_000):
                    await kinesis.call("ListShards", {"StreamName": server.stream_name})

        quiet = server.cpu_seconds()
        anyio.run(calls)
        assert server.cpu_seconds() > quiet
        assert server.stats()["cpu_seconds"] > quiet


async def _consumer(server: LoadTarget, name: str) -> str:
    async with server.client() as kinesis:
        consumer = await kinesis.call(
            "RegisterStreamConsumer", {"StreamARN": server.stream_arn, "ConsumerName": name}
        )
    return str(consumer["Consumer"]["ConsumerARN"])


async def test_fan_out_rate_limit_paces_events() -> None:
    """100 kB/s per subscription with 0.1 s of burst: half a second carries about 60 kB."""
    limits = Limits(efo_bytes_per_s=100_000, burst_seconds=0.1)
    synthetic = Synthetic(record_size=1000, records_per_event=10)
    with LoadTarget(shards=1, limits=limits, synthetic=synthetic, isolation="thread") as server:
        arn = await _consumer(server, "paced")
        received = 0
        async with (
            server.client(tls=True) as kinesis,
            kinesis.subscribe_to_shard(arn, server.shard_ids()[0], {"Type": "LATEST"}) as sub,
        ):
            with anyio.move_on_after(0.5):
                async for event in sub:
                    received += sum(len(r["Data"]) for r in event["Records"])
        assert 10_000 <= received <= 100_000


async def test_stream_reset_fault_surfaces_as_transport_error() -> None:
    synthetic = Synthetic(record_size=10, records_per_event=5)
    with LoadTarget(shards=1, synthetic=synthetic, isolation="thread") as server:
        arn = await _consumer(server, "reset")
        server.set_faults(Faults(stream_reset_share=1.0))
        with pytest.raises(errors.TransportError):
            async with (
                server.client(tls=True) as kinesis,
                kinesis.subscribe_to_shard(arn, server.shard_ids()[0], {"Type": "LATEST"}) as sub,
            ):
                with anyio.fail_after(5):
                    async for _ in sub:
                        pass
        assert server.stats()["faults"]["stream_reset"] >= 1


async def test_iterators_expire_after_five_minutes() -> None:
    with LoadTarget(shards=1, tls=False, manual_clock=True, isolation="thread") as server:
        async with server.client() as kinesis:
            iterator = (
                await kinesis.call(
                    "GetShardIterator",
                    {
                        "StreamName": "bench",
                        "ShardId": server.shard_ids()[0],
                        "ShardIteratorType": "TRIM_HORIZON",
                    },
                )
            )["ShardIterator"]
            server.advance_clock(301)
            with pytest.raises(errors.ExpiredIteratorError):
                await kinesis.call("GetRecords", {"ShardIterator": iterator})


async def test_at_timestamp_and_limit_find_the_first_record_at_or_after_a_time() -> None:
    """What the Spark source's planner asks: GetShardIterator(AT_TIMESTAMP, T) then
    GetRecords(Limit=1) is the first record at or after T, and nothing (at the tip,
    MillisBehindLatest 0) after the last one."""
    with LoadTarget(shards=1, retain_records=100, isolation="thread") as server:
        async with server.client() as kinesis:
            sequences = []
            for index in range(3):
                put = await kinesis.call(
                    "PutRecord",
                    {"StreamName": "bench", "Data": b"r%d" % index, "PartitionKey": "k"},
                )
                sequences.append(put["SequenceNumber"])
                await anyio.sleep(0.02)  # distinct arrival times: the point of the test
            shard = server.shard_ids()[0]
            iterator = (
                await kinesis.call(
                    "GetShardIterator",
                    {"StreamName": "bench", "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"},
                )
            )["ShardIterator"]
            records = (await kinesis.call("GetRecords", {"ShardIterator": iterator}))["Records"]
            arrivals = [record["ApproximateArrivalTimestamp"] for record in records]
            assert arrivals == sorted(arrivals) and len(set(arrivals)) == 3

            async def first_at(when: Any) -> tuple[list[str], int]:
                at = (
                    await kinesis.call(
                        "GetShardIterator",
                        {
                            "StreamName": "bench",
                            "ShardId": shard,
                            "ShardIteratorType": "AT_TIMESTAMP",
                            "Timestamp": when,
                        },
                    )
                )["ShardIterator"]
                page = await kinesis.call("GetRecords", {"ShardIterator": at, "Limit": 1})
                return [r["SequenceNumber"] for r in page["Records"]], page["MillisBehindLatest"]

            assert (await first_at(arrivals[1]))[0] == [sequences[1]]
            assert (await first_at(arrivals[0]))[0] == [sequences[0]]
            found, behind = await first_at(arrivals[2] + (arrivals[2] - arrivals[1]))
            assert found == [] and behind == 0
