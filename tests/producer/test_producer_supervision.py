"""The producer's senders are supervised actors (a record is only ever
given up with an error on its handle, never lost).

A sender crashing mid-call is a bug of ours, a fault no server can produce: it is injected by
wrapping the client's ``send`` so that chosen PutRecords calls reach the local server, are
answered, and then raise. The crashed call's records may have been written, so they are sent
again (at-least-once); every handle settles once; the restarts show in the snapshot.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from kinesis_actors.client import EncodedRequest, RetrySettings
from kinesis_actors.runtime import RestartIntensityExceeded
from tests.boto import read_back

pytestmark = pytest.mark.anyio


class CrashAfterSend:
    """``client.send`` that crashes after the PutRecords calls numbered in ``crash_on``
    (1-based; every one if ``None``) came back from the server."""

    def __init__(self, client: KinesisClient, crash_on: set[int] | None) -> None:
        self._send = client.send
        self._crash_on = crash_on
        self.calls = 0
        self.crashed = 0

    async def __call__(
        self, request: EncodedRequest, *, retry: RetrySettings | None = None
    ) -> dict[str, Any]:
        response = await self._send(request, retry=retry)
        if request.operation == "PutRecords":
            self.calls += 1
            if self._crash_on is None or self.calls in self._crash_on:
                self.crashed += 1
                raise RuntimeError(f"injected crash after PutRecords call {self.calls}")
        return response


def user_records(local: LocalKinesis, stream: str) -> list[bytes]:
    from kinesis_actors.records import deaggregate

    return [
        user.data
        for raw in read_back(local, stream).values()
        for record in raw
        for user in deaggregate(record["Data"], record["PartitionKey"])
    ]


async def test_a_sender_crashing_mid_call_is_restarted_and_loses_nothing(
    client: KinesisClient,
    local_kinesis: LocalKinesis,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await client.create_stream(stream_name, 2)
    crash = CrashAfterSend(client, crash_on={1, 3})
    monkeypatch.setattr(client, "send", crash)
    config = ProducerConfig(linger=0.01, max_in_flight_calls=2, restart_intensity=(5, 60.0))
    total = 300
    with anyio.fail_after(60):
        async with Producer(client, stream_name, config) as producer:
            handles = []
            for i in range(total):
                handles.append(await producer.put(f"r{i}".encode(), f"k{i % 7}"))
                if i % 50 == 49:
                    await producer.flush()  # several calls, so the crashes hit several
            await producer.flush()
            (tree,) = producer.supervision
            metrics = producer.metrics
    assert crash.crashed == 2
    # Every handle settled once, with a result: the crashed calls' records went again.
    results = [handle.result() for handle in handles]
    assert len(results) == total
    assert metrics.records_put == metrics.records_sent == total
    assert metrics.records_failed == 0
    assert metrics.sender_crashes == 2 and metrics.retries > 0
    # Restarts counted in the supervision snapshot, the causes named.
    senders = [child for child in tree.children if child.name.startswith("sender-")]
    assert [child.name for child in tree.children] == ["dispatcher", "sender-0", "sender-1"]
    assert sum(child.restarts for child in senders) == 2
    assert all(
        "injected crash" in (child.last_failure or "") for child in senders if child.restarts
    )
    assert tree.child("dispatcher").restarts == 0
    assert tree.to_dict()["children"][1]["mailbox"]["capacity"] == 1
    # Nothing lost: every record is in the stream, at least once.
    written = set(user_records(local_kinesis, stream_name))
    assert written == {f"r{i}".encode() for i in range(total)}


async def test_senders_crashing_past_the_restart_intensity_fail_the_producer_once_with_the_causes(
    client: KinesisClient, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await client.create_stream(stream_name, 1)
    crash = CrashAfterSend(client, crash_on=None)
    monkeypatch.setattr(client, "send", crash)
    config = ProducerConfig(
        linger=0.0,
        max_in_flight_calls=1,
        restart_intensity=(2, 60.0),
        max_unknown_outcomes=100,  # the supervisor, not the record's bound, gives up first
        exit_grace=0.0,
    )
    handles = []
    with anyio.fail_after(30), pytest.raises(errors.ProducerFailedError) as caught:
        async with Producer(client, stream_name, config) as producer:
            handles.extend([await producer.put(f"r{i}".encode(), "k") for i in range(20)])
            await producer.flush()
    failure = caught.value
    assert isinstance(failure.__cause__, RestartIntensityExceeded)
    causes = failure.__cause__.causes
    assert len(causes) == 3 and all(isinstance(cause, RuntimeError) for cause in causes)
    assert "injected crash" in str(failure) and "restart_intensity" in str(failure)
    # Never left hanging: every record failed, with an error of ours.
    assert all(handle.done() for handle in handles)
    assert all(
        isinstance(handle.exception(), errors.ProducerFailedError | errors.ProducerClosedError)
        for handle in handles
    )
    assert producer.metrics.records_failed == len(handles)
    (tree,) = producer.supervision
    assert tree.state == "failed"
    with pytest.raises(errors.ProducerClosedError):
        await producer.put(b"late", "k")


class CrashOnNth:
    """A method that raises on its ``crash_on``-th call (1-based), after the call being built
    has taken records of other lanes: a bug of ours in the dispatcher, which no server can
    produce, leaving the queue's state half-changed."""

    def __init__(self, method: Any, crash_on: int) -> None:
        self._method = method
        self._crash_on = crash_on
        self.calls = 0

    def patched(self) -> Any:
        def method(owner: Any, *args: Any) -> Any:
            self.calls += 1
            if self.calls == self._crash_on:
                raise IndexError(f"injected crash in call {self.calls}")
            return self._method(owner, *args)

        return method


@pytest.mark.parametrize(
    "site",
    [
        "CallBuilder._build_part",  # before a lane's records are taken: the call's earlier parts
        "Aggregator.add",  # while a lane's records are taken: those taken so far
        "Aggregator.build",  # after: this aggregate's records too
        "ShardRateLimiter.charge_grant",  # once every part is built
        "LaneMap.lane",  # while queued records are placed: some placed, some not
        "Delivery.__init__",  # as a built call is handed to a sender
    ],
)
async def test_a_dispatcher_crash_fails_every_outstanding_record_instead_of_hanging(
    client: KinesisClient,
    stream_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    site: str,
) -> None:
    from kinesis_actors.producer import ShardRateLimiter
    from kinesis_actors.producer._actors import Delivery
    from kinesis_actors.producer._builder import CallBuilder
    from kinesis_actors.producer._lanes import LaneMap
    from kinesis_actors.records import Aggregator

    owner_name, method_name = site.split(".")
    owner = {
        "CallBuilder": CallBuilder,
        "Aggregator": Aggregator,
        "ShardRateLimiter": ShardRateLimiter,
        "LaneMap": LaneMap,
        "Delivery": Delivery,
    }[owner_name]
    crash = CrashOnNth(getattr(owner, method_name), crash_on=3)
    monkeypatch.setattr(owner, method_name, crash.patched())
    await client.create_stream(stream_name, 4)
    # A queue of 40 records: without the fix the puts past it waited for room for ever
    # (the crashed call's records stayed "in flight", their keys' next records behind them).
    config = ProducerConfig(linger=0.0, queue_limit_records=40, exit_grace=0.0)
    handles = []
    with anyio.fail_after(30), pytest.raises(errors.ProducerFailedError) as caught:
        async with Producer(client, stream_name, config) as producer:
            for i in range(200):
                # 40 keys over 8 half-shard lanes: several a lane, so an aggregate takes
                # records of several domains before the injected crash.
                handles.append(await producer.put(f"r{i}".encode(), f"k{i % 40}"))
    failure = caught.value
    assert isinstance(failure.__cause__, IndexError)
    assert "dispatcher crashed" in str(failure) and "injected crash" in str(failure)
    assert crash.calls >= 3
    # Every record accepted settled: written, or failed with an error of ours.
    assert handles and all(handle.done() for handle in handles)
    failed = [handle.exception() for handle in handles if handle.exception() is not None]
    assert failed and all(
        isinstance(error, errors.ProducerFailedError | errors.ProducerClosedError)
        for error in failed
    )
    assert producer.metrics.records_failed == len(failed)
    assert producer.metrics.records_sent == len(handles) - len(failed)
    # Not restarted over a queue state it may have left half-changed.
    (tree,) = producer.supervision
    assert tree.child("dispatcher").restarts == 0
    # Said at once, with the bug's traceback.
    (logged,) = [record for record in caplog.records if record.exc_info]
    assert "dispatcher crashed" in logged.getMessage()
    assert logged.exc_info is not None and logged.exc_info[1] is failure.__cause__
    with pytest.raises(errors.ProducerClosedError):
        await producer.put(b"late", "k")


async def test_a_dispatcher_crash_while_the_producer_opens_is_the_typed_failure(
    client: KinesisClient, stream_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening or the first put fails with ProducerFailedError naming the crash (not anyio's
    RuntimeError of a task that never said it started)."""
    from kinesis_actors.producer._sender import Sender

    await client.create_stream(stream_name, 1)

    async def crash_at_once(self: Any, queue: Any, task_group: Any) -> None:
        raise IndexError("injected crash as the dispatcher starts")

    monkeypatch.setattr(Sender, "dispatch", crash_at_once)
    with anyio.fail_after(30), pytest.raises(errors.ProducerFailedError) as caught:
        async with Producer(client, stream_name, ProducerConfig(exit_grace=0.0)) as producer:
            await producer.put(b"r", "k")
    assert "dispatcher crashed" in str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, IndexError) and "injected crash" in str(cause)
