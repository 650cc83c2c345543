"""How fast the load target itself is, measured with lean clients.

    .venv/bin/python -m benchmarks.loadtarget.selfbench [--quick] [--json]

The clients send pre-encoded requests over raw keep-alive sockets (and read SubscribeToShard
with the library's HTTP/2 transport without decoding events), so nearly all the work is the
target's. Figures: calls and records per second of wall time, the target's CPU seconds, and
records per CPU-second of the target (its capacity per core).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import ssl
import sys
import time
from typing import Any

from benchmarks.loadtarget import LoadTarget, Synthetic


def _request(target: str, body: bytes) -> bytes:
    return (
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-amz-json-1.1\r\n"
        f"X-Amz-Target: Kinesis_20131202.{target}\r\n"
        "Authorization: AWS4-HMAC-SHA256 Credential=x/20240101/us-east-1/kinesis/aws4_request, "
        "SignedHeaders=host, Signature=00\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> bytes:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    start = head.lower().index(b"content-length:") + 15
    length = int(head[start : head.index(b"\r\n", start)])
    return await reader.readexactly(length)


async def _hammer(port: int, requests: list[bytes], connections: int, seconds: float) -> int:
    """Send ``requests`` round robin on ``connections`` sockets for ``seconds``; calls made."""
    deadline = time.perf_counter() + seconds
    done = 0

    async def worker(offset: int) -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        index = offset
        while time.perf_counter() < deadline:
            await _exchange(reader, writer, requests[index % len(requests)])
            index += 1
            done += 1
        writer.close()

    await asyncio.gather(*(worker(i) for i in range(connections)))
    return done


def _put_records_bodies(count: int, size: int, keys: int) -> list[bytes]:
    rng = random.Random(7)
    bodies = []
    for _ in range(8):
        records = [
            {
                "Data": base64.b64encode(rng.randbytes(size)).decode(),
                "PartitionKey": f"key-{rng.randrange(keys)}",
            }
            for _ in range(count)
        ]
        bodies.append(json.dumps({"StreamName": "bench", "Records": records}).encode())
    return bodies


def _measure(target: LoadTarget, run: Any) -> tuple[float, float, Any]:
    cpu, wall = target.cpu_seconds(), time.perf_counter()
    result = run()
    return time.perf_counter() - wall, target.cpu_seconds() - cpu, result


def _figures(calls: int, records: int, wall: float, cpu: float) -> dict[str, float]:
    return {
        "calls_per_s": calls / wall,
        "records_per_s": records / wall,
        "target_cpu_share": cpu / wall,
        "records_per_target_cpu_s": records / cpu if cpu else float("inf"),
        "target_us_per_record": cpu / records * 1e6 if records else 0.0,
    }


def bench_put_records(seconds: float, size: int, retain: int, limits: bool) -> dict[str, float]:
    with LoadTarget(shards=4, tls=False, retain_records=retain, limits=limits) as target:
        bodies = [_request("PutRecords", body) for body in _put_records_bodies(500, size, 1000)]
        wall, cpu, calls = _measure(
            target, lambda: asyncio.run(_hammer(target.port, bodies, 8, seconds))
        )
        return _figures(calls, calls * 500, wall, cpu)


def bench_get_records(seconds: float, size: int) -> dict[str, float]:
    synthetic = Synthetic(record_size=size, records_per_call=10_000)
    with LoadTarget(shards=4, tls=False, synthetic=synthetic) as target:
        iterator = "LT.0.1.0"  # a position; the synthetic shard serves from anywhere
        body = json.dumps({"ShardIterator": iterator, "Limit": 10_000}).encode()
        requests = [_request("GetRecords", body)]
        wall, cpu, calls = _measure(
            target, lambda: asyncio.run(_hammer(target.port, requests, 2, seconds))
        )
        return _figures(calls, calls * 10_000, wall, cpu)


async def _subscribe(target: LoadTarget, seconds: float) -> tuple[int, int]:
    from kinesis_actors import KinesisClient  # noqa: PLC0415
    from kinesis_actors.client import H2Stream  # noqa: PLC0415

    async with target.client() as client:
        consumer = await client.call(
            "RegisterStreamConsumer", {"StreamARN": target.stream_arn, "ConsumerName": "bench"}
        )
    arn = consumer["Consumer"]["ConsumerARN"]
    context = ssl.create_default_context(cafile=target.ca_file)
    context.set_alpn_protocols(["h2"])
    body = json.dumps(
        {
            "ConsumerARN": arn,
            "ShardId": "shardId-000000000000",
            "StartingPosition": {"Type": "LATEST"},
        }
    ).encode()
    headers = {
        "X-Amz-Target": "Kinesis_20131202.SubscribeToShard",
        "Content-Type": "application/x-amz-json-1.1",
    }
    received = 0
    async with await H2Stream.open(
        target.tls_endpoint_url + "/",
        headers,
        body,
        ssl_context=context,
        connect_timeout=5,
        read_timeout=10,
        window=2**30,
        operation="SubscribeToShard",
    ) as stream:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            received += len(await stream.receive())
    del KinesisClient
    return received, 0


def bench_subscribe(seconds: float, size: int) -> dict[str, float]:
    import anyio  # noqa: PLC0415

    synthetic = Synthetic(record_size=size, records_per_event=1000)
    with LoadTarget(shards=1, synthetic=synthetic) as target:
        before = target.stats()["totals"]["records_out"]
        wall, cpu, (received, _) = _measure(target, lambda: anyio.run(_subscribe, target, seconds))
        records = target.stats()["totals"]["records_out"] - before
        figures = _figures(0, records, wall, cpu)
        figures["mib_per_s"] = received / wall / 2**20
        return figures


async def _client_puts(target: LoadTarget, seconds: float, size: int) -> int:
    import anyio  # noqa: PLC0415

    rng = random.Random(3)
    batches = [
        [
            {"Data": rng.randbytes(size), "PartitionKey": f"key-{rng.randrange(1000)}"}
            for _ in range(500)
        ]
        for _ in range(4)
    ]
    calls = 0
    deadline = time.perf_counter() + seconds
    async with target.client() as client:

        async def worker(offset: int) -> None:
            nonlocal calls
            while time.perf_counter() < deadline:
                batch = batches[(calls + offset) % len(batches)]
                await client.call("PutRecords", {"StreamName": "bench", "Records": batch})
                calls += 1

        async with anyio.create_task_group() as group:
            for offset in range(8):
                group.start_soon(worker, offset)
    return calls


def bench_client_put_records(seconds: float, size: int) -> dict[str, float]:
    """The library's own client against the target: whose CPU runs out first?"""
    import anyio  # noqa: PLC0415

    with LoadTarget(shards=4, tls=False) as target:
        client_cpu = time.process_time()
        wall, cpu, calls = _measure(target, lambda: anyio.run(_client_puts, target, seconds, size))
        client_cpu = time.process_time() - client_cpu
        figures = _figures(calls, calls * 500, wall, cpu)
        figures["client_cpu_share"] = client_cpu / wall
        return figures


def run(quick: bool) -> dict[str, Any]:
    seconds = 1.5 if quick else 5.0
    results: dict[str, Any] = {
        "put_records_100B": bench_put_records(seconds, 100, 0, False),
        "put_records_1KiB": bench_put_records(seconds, 1024, 0, False),
        "put_records_100B_limits_retain_mostly_throttled": bench_put_records(
            seconds, 100, 100_000, True
        ),
        "get_records_synthetic_100B": bench_get_records(seconds, 100),
        "subscribe_synthetic_100B": bench_subscribe(seconds, 100),
        "kinesis_client_put_records_100B": bench_client_put_records(seconds, 100),
    }
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.quick)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return
    for name, figures in results.items():
        shown = ", ".join(f"{key} {value:,.1f}" for key, value in figures.items())
        print(f"{name}: {shown}")


if __name__ == "__main__":
    main()
