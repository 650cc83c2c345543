"""A dead endpoint is said, not waited on in silence.

A local server of the test's own is stopped mid-produce. With the defaults, records wait (never
dropped) and, within a few seconds, a warning names the endpoint and the connection failure;
the metrics say for how long. With ``record_ttl``, each record fails with RecordExpiredError
within the ttl plus one retry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator

import anyio
import pytest

from kinesis_actors import KinesisClient, LocalKinesis, Producer, ProducerConfig, errors
from tests.faults import Cut, FaultProxy

pytestmark = pytest.mark.anyio


class Said(logging.Handler):
    """Sets ``event`` on the first record of the producer's logger containing ``words``."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.WARNING)
        self.words = words
        self.event = anyio.Event()
        self.message = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.words in message and not self.event.is_set():
            self.message = message
            self.event.set()


@pytest.fixture
async def doomed() -> AsyncIterator[LocalKinesis]:
    """A local server this test may stop."""
    with LocalKinesis() as server:
        yield server


class Leave(Exception):
    """Leaves the producer's block without waiting for a flush that cannot finish."""


async def test_with_defaults_a_stopped_server_is_named_in_a_warning_and_the_metrics(
    doomed: LocalKinesis,
) -> None:
    said = Said("has not answered")
    logger = logging.getLogger("kinesis_actors.producer")
    logger.addHandler(said)
    config = ProducerConfig(linger=0.01, exit_grace=0.0)
    try:
        async with doomed.client(tls=False) as client:
            await client.create_stream("doomed", 1)
            with pytest.raises(Leave):
                async with Producer(client, "doomed", config) as producer:
                    await (await producer.put(b"before", "k"))
                    await anyio.to_thread.run_sync(doomed.stop)
                    handles = [await producer.put(b"after", f"k{i}") for i in range(5)]
                    with anyio.fail_after(15):  # "within a few seconds": warned after 1 s
                        await said.event.wait()
                    metrics = producer.metrics
                    waiting = [handle.done() for handle in handles]
                    raise Leave
    finally:
        logger.removeHandler(said)
    assert str(client.endpoint_url) in said.message
    assert "ConnectError" in said.message or "refused" in said.message.lower()
    assert "record_ttl=None" in said.message
    assert metrics.unreachable_seconds >= config.backpressure_warning_after
    assert metrics.records_failed == 0 and not any(waiting)  # waiting, never dropped
    assert all(isinstance(h.exception(), errors.ProducerClosedError) for h in handles)


async def test_with_record_ttl_a_stopped_server_fails_each_record_within_ttl_and_one_retry(
    doomed: LocalKinesis,
) -> None:
    ttl = 2.0
    config = ProducerConfig(linger=0.01, record_ttl=ttl, retry_max=1.0, fail_on_error=False)
    async with doomed.client(tls=False) as client:
        await client.create_stream("doomed", 1)
        async with Producer(client, "doomed", config) as producer:
            await (await producer.put(b"before", "k"))
            await anyio.to_thread.run_sync(doomed.stop)
            handles = [await producer.put(b"after", f"k{i}") for i in range(5)]
            with anyio.fail_after(ttl + config.retry_max + 1.0):
                for handle in handles:
                    with pytest.raises(errors.RecordExpiredError) as caught:
                        await handle
                    assert isinstance(caught.value.__cause__, errors.TransportError)
            assert producer.metrics.unreachable_seconds > 0


async def test_a_healthy_endpoint_reads_zero_seconds_unreachable(
    client: KinesisClient, stream_name: str
) -> None:
    """A healthy endpoint reads 0.0: nothing unreachable to report."""
    await client.create_stream(stream_name, 1)
    async with Producer(client, stream_name, ProducerConfig(linger=0.0)) as producer:
        await (await producer.put(b"x", "k"))
        assert producer.metrics.unreachable_seconds == 0.0


async def test_a_put_waiting_for_room_names_the_silent_endpoint_not_throttling(
    doomed: LocalKinesis,
) -> None:
    """The queue fills while the endpoint is down: the put's own warning says why."""
    said = Said("put waited")
    logger = logging.getLogger("kinesis_actors.producer")
    logger.addHandler(said)
    config = ProducerConfig(
        linger=0.0, queue_limit_records=2, exit_grace=0.0, backpressure_warning_after=0.2
    )
    try:
        async with doomed.client(tls=False) as client:
            await client.create_stream("doomed", 1)
            with pytest.raises(Leave):
                async with Producer(client, "doomed", config) as producer:
                    await (await producer.put(b"before", "k"))
                    await anyio.to_thread.run_sync(doomed.stop)
                    await producer.put(b"a", "k1")
                    await producer.put(b"b", "k2")
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(producer.put, b"c", "k3")  # no room: waits
                        with anyio.fail_after(15):
                            await said.event.wait()
                        tg.cancel_scope.cancel()
                    raise Leave
    finally:
        logger.removeHandler(said)
    assert "has not answered" in said.message and str(client.endpoint_url) in said.message
    assert "not keeping up" not in said.message


async def test_after_a_real_outage_has_not_answered_and_answers_again_come_as_a_pair(
    client: KinesisClient,
    local_kinesis: LocalKinesis,
    proxy: FaultProxy,
    stream_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every connection is cut until the outage is said, then let through: the warning, then
    "answers again" once, and every record written. ("answers again" waits for
    the warning; this is the pair that must remain.)"""
    outage = threading.Event()
    proxy.decide = lambda request: Cut() if outage.is_set() else None
    lost, back = Said("has not answered"), Said("answers again")
    logger = logging.getLogger("kinesis_actors.producer")
    logger.addHandler(lost)
    logger.addHandler(back)
    caplog.set_level(logging.WARNING, "kinesis_actors.producer")
    config = ProducerConfig(
        linger=0.0, retry_base=0.01, retry_max=0.2, backpressure_warning_after=0.2
    )
    await client.create_stream(stream_name, 1)
    try:
        async with (
            KinesisClient(
                region=local_kinesis.region,
                endpoint_url=proxy.endpoint_url,
                credentials=local_kinesis.credentials,
            ) as proxied,
            Producer(proxied, stream_name, config) as producer,
        ):
            await (await producer.put(b"before", "k"))
            outage.set()
            handles = [await producer.put(b"during%d" % i, f"k{i}") for i in range(5)]
            with anyio.fail_after(30):
                await lost.event.wait()
            outage.clear()
            with anyio.fail_after(30):
                await back.event.wait()
                for handle in handles:
                    await handle
    finally:
        for handler in (lost, back):
            logger.removeHandler(handler)
    said = [record.getMessage() for record in caplog.records]
    pair = [m for m in said if "has not answered" in m or "answers again" in m]
    assert "has not answered" in pair[0] and "answers again" in pair[-1]
    assert sum("answers again" in m for m in pair) == 1
    assert proxy.stats.faults.get("cut", 0) >= 1
