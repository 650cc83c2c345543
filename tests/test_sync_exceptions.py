"""A user's exception is the user's, for ``with SyncProducer(...)``: what the block
raises leaves it as itself, ``sys.exit(3)`` exits 3, and leaving on an exception is bounded
by ``exit_grace`` whatever the stream does. Both loop backends, against the local server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from kinesis_actors import LocalKinesis, ProducerConfig, PutHandle, errors
from kinesis_actors import sync as sync_module
from kinesis_actors.sync import SyncProducer
from tests.boto import create_stream
from tests.faults import FaultProxy, Reply, Request

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stream(local_kinesis: LocalKinesis, stream_name: str) -> str:
    create_stream(local_kinesis, stream_name, 1)
    return stream_name


def throttle_every_put(request: Request) -> Reply | None:
    if request.target == "PutRecords":
        return Reply.error("ProvisionedThroughputExceededException")
    return None


def _producer(
    endpoint: str, local: LocalKinesis, stream: str, backend: str, **config: object
) -> SyncProducer:
    return SyncProducer(
        stream,
        endpoint_url=endpoint,
        credentials=local.credentials,
        config=ProducerConfig(linger=0.01, **config),  # type: ignore[arg-type]
        batch_size=2,
        backend=backend,
    )


def test_a_key_error_in_the_block_is_caught_as_itself_and_what_was_put_is_delivered(
    local_kinesis: LocalKinesis, stream: str, backend: str
) -> None:
    raised = KeyError("the user's")
    handles: list[PutHandle] = []
    try:
        with _producer(local_kinesis.endpoint_url, local_kinesis, stream, backend) as producer:
            handles.extend(producer.put(b"x", f"k{i}") for i in range(5))  # one still buffered
            raise raised
    except KeyError as caught:
        assert caught is raised
        assert caught.__context__ is None  # no group, no error of ours chained on it
    else:  # pragma: no cover - the assertion's message
        pytest.fail("the KeyError did not reach the caller")
    assert all(handle.result().shard_id.startswith("shardId-") for handle in handles)
    with pytest.raises(errors.ProducerClosedError):
        producer.put(b"late", "k")


def test_keyboard_interrupt_leaves_as_itself_at_once(
    local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy, backend: str
) -> None:
    proxy.decide = throttle_every_put
    interrupt = KeyboardInterrupt()
    started = time.monotonic()
    producer = _producer(proxy.endpoint_url, local_kinesis, stream, backend)
    with pytest.raises(KeyboardInterrupt) as interrupted, producer:
        handle = producer.put(b"x", "k")
        started = time.monotonic()
        raise interrupt
    assert interrupted.value is interrupt
    assert time.monotonic() - started < 1.0  # no grace: the user asked to stop
    assert isinstance(handle.exception(), errors.ProducerClosedError)


def test_leaving_on_a_key_error_under_permanent_throttling_takes_the_grace_not_forever(
    local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy, backend: str
) -> None:
    """Measured before: ``__exit__`` still waiting after 60 s. Now ``exit_grace``."""
    proxy.decide = throttle_every_put
    handles: list[PutHandle] = []
    started = time.monotonic()
    with (
        pytest.raises(KeyError),
        _producer(proxy.endpoint_url, local_kinesis, stream, backend, exit_grace=0.5) as producer,
    ):
        handles.extend(producer.put(b"x", f"k{i}") for i in range(5))
        started = time.monotonic()
        raise KeyError("the user's")
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 3.0, elapsed
    assert len(handles) == 5
    assert all(isinstance(h.exception(), errors.ProducerClosedError) for h in handles)
    assert producer.metrics.records_sent == 0 and producer.metrics.outstanding_records == 0


def test_a_producer_failure_raised_by_put_leaves_the_block_as_itself(
    local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy, backend: str
) -> None:
    """A record expiring under ``record_ttl`` with ``fail_on_error``: the next flush raises
    ProducerFailedError in the block, and that is what the caller catches."""
    proxy.decide = throttle_every_put
    config = {"record_ttl": 0.3, "retry_base": 0.05, "retry_max": 0.1}
    producer = _producer(proxy.endpoint_url, local_kinesis, stream, backend, **config)
    with pytest.raises(errors.ProducerFailedError) as failed, producer:
        handle = producer.put(b"x", "k")
        producer.flush(timeout=10)
    assert type(failed.value) is errors.ProducerFailedError
    assert isinstance(failed.value.__cause__, errors.RecordExpiredError)
    assert isinstance(handle.exception(), errors.RecordExpiredError)


_EXIT_SCRIPT = textwrap.dedent(
    """
    import sys
    from kinesis_actors import ProducerConfig
    from kinesis_actors.sync import SyncProducer

    endpoint, stream, backend = sys.argv[1:4]
    credentials = tuple(sys.argv[4:])
    with SyncProducer(stream, endpoint_url=endpoint, credentials=credentials,
                      config=ProducerConfig(linger=0.01), backend=backend) as producer:
        producer.put(b"x", "k")
        sys.exit(3)
    """
)


def test_sys_exit_in_the_block_exits_with_its_code(
    local_kinesis: LocalKinesis, stream: str, backend: str
) -> None:
    """Before: exit status 1 and "RuntimeError: This portal is not running" (both backends):
    the SystemExit was passed into the loop thread, where it stopped the loop."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _EXIT_SCRIPT,
            local_kinesis.endpoint_url,
            stream,
            backend,
            *local_kinesis.credentials,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_close_past_its_timeout_returns_even_if_the_flush_never_ended(
    local_kinesis: LocalKinesis, stream: str, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every exit is bounded: a flush that an abort does not end (a bug of ours, injected
    here) is cancelled after a grace, so ``close(timeout=...)`` still returns."""
    proxy.decide = throttle_every_put
    producer = _producer(proxy.endpoint_url, local_kinesis, stream, "asyncio")
    producer.put(b"x", "k")

    async def never_ends() -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(producer.producer, "flush", never_ends)
    started = time.monotonic()
    producer.close(timeout=0.2)
    elapsed = time.monotonic() - started
    assert elapsed < 0.2 + sync_module._ABORT_GRACE + 2.0, elapsed
