"""Assume-role credentials against a real STS API (moto's, IAM enforced; ``tests/sts.py``).

The local Kinesis and DynamoDB servers accept any credentials, so what is checked is what
reached them: a fault proxy in front of each reads the access key id of every request's
signature, and it must be one STS issued for the role. STS's side is counted at the STS server.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator

import anyio
import pytest

from kinesis_actors import (
    AssumeRole,
    Consumer,
    ConsumerConfig,
    KinesisClient,
    LocalDynamoDB,
    LocalKinesis,
    Producer,
    ProducerConfig,
    StartingPosition,
    errors,
)
from kinesis_actors.client._role import RefreshTiming
from kinesis_actors.leases import LeaseConfig
from tests.faults import Cut, FaultProxy, Request
from tests.sts import LocalSTS

pytestmark = [pytest.mark.anyio, pytest.mark.local_kinesis]

_KEY_ID = re.compile(r"Credential=([A-Z0-9]+)/")


class SignedBy:
    """A proxy's ``decide`` that records the access key id of every request it forwards;
    ``new_key`` is set when a key other than the first appears."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.new_key = threading.Event()

    def __call__(self, request: Request) -> None:
        found = _KEY_ID.search(request.headers.get("authorization", ""))
        key = found.group(1) if found else "unsigned"
        if self.keys and key != self.keys[0]:
            self.new_key.set()
        self.keys.append(key)


@pytest.fixture
def signed_by(proxy: FaultProxy) -> SignedBy:
    recorder = SignedBy()
    proxy.decide = recorder
    return recorder


@pytest.fixture
def dynamodb_proxy(local_dynamodb: LocalDynamoDB) -> Iterator[FaultProxy]:
    with FaultProxy(local_dynamodb.port) as running:
        yield running


def role(local_sts: LocalSTS, role_arn: str, **options: object) -> AssumeRole:
    base = options.pop("credentials", local_sts.allowed)
    return AssumeRole(
        role_arn,
        sts_endpoint_url=local_sts.endpoint_url,
        credentials=base,  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


async def test_a_client_signs_with_the_credentials_sts_issued_for_the_role(
    local_sts: LocalSTS,
    role_arn: str,
    local_kinesis: LocalKinesis,
    proxy: FaultProxy,
    signed_by: SignedBy,
    stream_name: str,
) -> None:
    assumed = role(
        local_sts, role_arn, session_name="reader-test", external_id="ext-4711", duration=1800
    )
    async with KinesisClient(
        local_kinesis.region, endpoint_url=proxy.endpoint_url, credentials=assumed
    ) as client:
        assert len(local_sts.calls(role_arn)) == 1  # assumed when the client opened
        await client.create_stream(stream_name, 1)
        async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
            await (await producer.put(b"x", "k"))
        await client.call("ListShards", {"StreamName": stream_name})

    (call,) = local_sts.calls(role_arn)
    assert call.status == 200
    assert call.signed_by == local_sts.allowed[0]  # assumed with the base credentials given
    assert (call.session_name, call.external_id, call.duration) == (
        "reader-test",
        "ext-4711",
        "1800",
    )
    issued = local_sts.issued(role_arn)
    assert len(issued) == 1 and issued[0].startswith("ASIA")
    assert len(signed_by.keys) >= 4 and set(signed_by.keys) == set(issued)
    assert assumed.statistics().assumed == 1 and assumed.statistics().waited == 1


async def test_a_lease_group_signs_its_table_calls_with_the_consumers_role(
    local_sts: LocalSTS,
    role_arn: str,
    local_kinesis: LocalKinesis,
    dynamodb_proxy: FaultProxy,
    lease_table_name: str,
    stream_name: str,
) -> None:
    table_calls = SignedBy()
    dynamodb_proxy.decide = table_calls
    assumed = role(local_sts, role_arn)
    config = ConsumerConfig(
        start=StartingPosition.trim_horizon(),
        lease_table=lease_table_name,
        worker_id="w1",
        dynamodb_endpoint_url=dynamodb_proxy.endpoint_url,
        leases=LeaseConfig(failover_time=2.0, renew_interval=0.4, take_interval=0.2),
        idle_backoff_initial=0.05,
        idle_backoff_max=0.1,
    )
    async with KinesisClient(
        local_kinesis.region, endpoint_url=local_kinesis.endpoint_url, credentials=assumed
    ) as client:
        await client.create_stream(stream_name, 1)
        async with Producer(client, stream_name, ProducerConfig(linger=0.01)) as producer:
            await (await producer.put(b"leased", "k"))
        with anyio.fail_after(60):
            async with Consumer(client, stream_name, config) as consumer:
                async for batch in consumer:
                    assert batch.arrow.column("data").to_pylist() == [b"leased"]
                    consumer.commit(batch)
                    break

    issued = local_sts.issued(role_arn)
    assert len(issued) == 1  # one role session for the Kinesis and the DynamoDB client
    assert len(local_sts.calls(role_arn)) == 1
    assert table_calls.keys and set(table_calls.keys) == set(issued)


async def test_access_denied_by_sts_fails_the_open_at_once_naming_the_role(
    local_sts: LocalSTS,
    role_arn: str,
    local_kinesis: LocalKinesis,
    proxy: FaultProxy,
    signed_by: SignedBy,
) -> None:
    denied = role(local_sts, role_arn, credentials=local_sts.denied)
    client = KinesisClient(
        local_kinesis.region, endpoint_url=proxy.endpoint_url, credentials=denied
    )
    with anyio.fail_after(30), pytest.raises(errors.AssumeRoleError) as raised:
        async with client:
            pytest.fail("the client opened without credentials")
    assert raised.value.role_arn == role_arn
    assert raised.value.code == "AccessDenied" and raised.value.status_code == 403
    assert role_arn in str(raised.value)
    # Refused once, and not asked again: neither botocore's STS client nor ours retried.
    assert [call.status for call in local_sts.calls(role_arn)] == [403]
    assert signed_by.keys == []  # nothing reached Kinesis
    assert denied.statistics().failures == 1 and denied.statistics().assumed == 0


async def test_a_call_that_needs_credentials_sts_refuses_fails_at_once(
    local_sts: LocalSTS, role_arn: str, local_kinesis: LocalKinesis
) -> None:
    """Credentials that expired (by the role's clock) and cannot be renewed: the call raises
    the typed error, without the client's retry loop."""
    now = [1_000.0]
    denied = role(local_sts, role_arn, credentials=local_sts.denied, clock=lambda: now[0])
    with pytest.raises(errors.AssumeRoleError):
        denied.get_frozen_credentials()
    client = KinesisClient(
        local_kinesis.region, endpoint_url=local_kinesis.endpoint_url, credentials=denied
    )
    with pytest.raises(errors.AssumeRoleError):
        await client.__aenter__()
    assert client.statistics().retries == 0 and client.statistics().attempts == 0
    assert len(local_sts.calls(role_arn)) == 2


async def test_credentials_are_renewed_ahead_of_expiry_on_a_long_read_without_a_wait(
    local_sts: LocalSTS,
    role_arn: str,
    local_kinesis: LocalKinesis,
    proxy: FaultProxy,
    signed_by: SignedBy,
    stream_name: str,
) -> None:
    # Renewed once less than 899 of the 900 seconds remain: about a second after each issue.
    assumed = role(local_sts, role_arn, duration=900, refresh_margin=899.0)
    config = ConsumerConfig(
        start=StartingPosition.trim_horizon(), idle_backoff_initial=0.05, idle_backoff_max=0.1
    )
    async with KinesisClient(
        local_kinesis.region, endpoint_url=proxy.endpoint_url, credentials=assumed
    ) as client:
        first = assumed.statistics().expires_at
        await client.create_stream(stream_name, 1)
        async with (
            Consumer(client, stream_name, config) as consumer,
            anyio.create_task_group() as tg,
        ):

            async def read() -> None:
                async for _ in consumer:
                    pass

            tg.start_soon(read)
            with anyio.fail_after(60):
                renewed = await anyio.to_thread.run_sync(signed_by.new_key.wait, 60)
            tg.cancel_scope.cancel()
        assert renewed
        await client.call("ListShards", {"StreamName": stream_name})

    stats = assumed.statistics()
    assert stats.refreshed_ahead >= 1 and stats.assumed >= 2
    # Only the open waited for credentials: every later request signed with those in hand.
    assert stats.waited == 1 and stats.failures == 0
    assert first is not None and stats.expires_at is not None and stats.expires_at > first
    issued = local_sts.issued(role_arn)
    assert set(signed_by.keys) <= set(issued) and len(set(signed_by.keys)) >= 2
    assert signed_by.keys[0] == issued[0]


def test_threads_signing_at_once_in_the_refresh_window_share_one_sts_call(
    local_sts: LocalSTS, role_arn: str
) -> None:
    now = [0.0]
    assumed = role(local_sts, role_arn, duration=3600, clock=lambda: now[0])
    now[0] = 1e9  # any clock: the role's decisions follow it, STS's expiry is read once
    assert assumed.refresh_needed()
    first = assumed.get_frozen_credentials()
    expires = assumed.statistics().expires_at
    assert expires is not None
    now[0] = expires - 600  # inside the 900 s margin, outside its last third (300 s)
    assert not assumed.refresh_needed()

    seen: list[object] = []
    together = threading.Barrier(8)

    def sign() -> None:
        together.wait(10)
        seen.append(assumed.get_frozen_credentials())

    threads = [threading.Thread(target=sign) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    _join_refresh(role_arn)
    renewed = assumed.get_frozen_credentials()
    assert renewed != first
    # Nobody waited (only the first fetch did): each got the credentials in hand, the old
    # ones or, if it came after the background refresh, the new ones.
    assert assumed.statistics().waited == 1
    assert len(seen) == 8 and set(seen) <= {first, renewed} and first in seen
    assert len(local_sts.calls(role_arn)) == 2  # one refresh for the eight
    assert assumed.statistics().refreshed_ahead == 1


def _join_refresh(role_arn: str) -> None:
    for thread in threading.enumerate():
        if thread.name == f"kinesis-actors assume {role_arn}":
            thread.join(60)


def test_sts_failing_in_the_background_keeps_the_credentials_in_hand_and_backs_off(
    local_sts: LocalSTS, role_arn: str, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    with FaultProxy(local_sts.port) as sts_proxy:
        assumed = AssumeRole(
            role_arn,
            sts_endpoint_url=sts_proxy.endpoint_url,
            credentials=local_sts.allowed,
            clock=lambda: now[0],
        )
        first = assumed.get_frozen_credentials()
        expires = assumed.statistics().expires_at
        assert expires is not None
        sts_proxy.decide = lambda request: Cut()  # STS unreachable from here on
        now[0] = expires - 600  # inside the margin: renewed in the background

        assert assumed.get_frozen_credentials() == first  # no wait, the current ones
        _join_refresh(role_arn)
        assert assumed.statistics().failures == 1 and assumed.statistics().assumed == 1
        cut = sts_proxy.stats.faults["cut"]  # botocore's attempts of that one refresh
        warned = [r.getMessage() for r in caplog.records if r.name == "kinesis_actors.client"]
        assert any(role_arn in line and "ahead of expiry failed" in line for line in warned)

        now[0] += 0.5  # within the 1 s backoff: no new attempt, the same credentials
        assert assumed.get_frozen_credentials() == first
        _join_refresh(role_arn)
        assert sts_proxy.stats.faults["cut"] == cut

        sts_proxy.decide = lambda request: None  # STS back
        now[0] += 1.0
        assert assumed.get_frozen_credentials() == first  # starts the next attempt
        _join_refresh(role_arn)
        assert assumed.get_frozen_credentials() != first
        assert assumed.statistics().refreshed_ahead == 1 and assumed.statistics().waited == 1


def test_bad_role_settings_fail_at_construction_naming_them() -> None:
    arn = "arn:aws:iam::123456789012:role/r"
    cases = [
        ({"role_arn": "arn:aws:iam::123:user/bob"}, "AssumeRole.role_arn"),
        ({"session_name": "x"}, "AssumeRole.session_name"),
        ({"session_name": "has space"}, "AssumeRole.session_name"),
        ({"external_id": "no spaces allowed"}, "AssumeRole.external_id"),
        ({"sts_endpoint_url": "sts.local"}, "AssumeRole.sts_endpoint_url"),
        ({"sts_region": ""}, "AssumeRole.sts_region"),
        ({"duration": 60}, "AssumeRole.duration"),
        ({"duration": 900, "refresh_margin": 900}, "AssumeRole.refresh_margin"),
        ({"refresh_margin": 0}, "AssumeRole.refresh_margin"),
        ({"credentials": ["key", "secret"]}, "credentials"),
    ]
    for options, named in cases:
        arguments: dict[str, object] = {"role_arn": arn, **options}
        with pytest.raises(errors.ConfigError) as raised:
            AssumeRole(**arguments)  # type: ignore[arg-type]
        assert str(raised.value).startswith(named), (options, str(raised.value))
    with pytest.raises(errors.ConfigError) as raised:
        AssumeRole(arn, external_id="secret id!")
    assert "secret id" not in str(raised.value)


def test_no_secret_of_the_role_in_a_repr_a_log_line_or_an_error(
    local_sts: LocalSTS, role_arn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assumed = role(local_sts, role_arn, external_id="ext-secret-0042")
    frozen = assumed.get_frozen_credentials()
    denied = role(local_sts, role_arn, credentials=local_sts.denied, external_id="ext-secret-0042")
    with pytest.raises(errors.AssumeRoleError) as raised:
        denied.get_frozen_credentials()
    texts = [repr(assumed), repr(denied), repr(assumed.statistics()), str(raised.value)]
    texts += [repr(raised.value)]
    texts += [
        logging.Formatter("%(name)s %(message)s").format(r)
        for r in caplog.records
        if not r.name.startswith(
            ("botocore", "urllib3", "werkzeug", "moto")
        )  # not ours; moto is STS
    ]
    secrets = [local_sts.allowed[1], local_sts.denied[1], frozen.secret_key, frozen.token]
    secrets.append("ext-secret-0042")
    assert any(role_arn in text for text in texts)
    assert [text for text in texts for secret in secrets if secret in text] == []


def test_the_refresh_timing_uses_then_renews_ahead_then_waits() -> None:
    timing = RefreshTiming(900.0)
    assert timing.decide(None, 0.0) == "wait"  # no credentials yet
    assert timing.decide(10_000.0, 0.0) == "use"
    assert timing.decide(10_000.0, 9_100.0) == "ahead"  # 900 s left
    assert timing.decide(10_000.0, 9_699.0) == "ahead"
    assert timing.decide(10_000.0, 9_700.0) == "wait"  # a third of the margin left
    assert timing.decide(10_000.0, 10_001.0) == "wait"  # expired


def test_a_failed_background_refresh_backs_off_doubling_to_a_minute() -> None:
    timing = RefreshTiming(900.0)
    backoffs = [timing.failed(9_200.0) for _ in range(8)]
    assert backoffs == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert timing.decide(10_000.0, 9_259.0) == "use"  # backing off: no new attempt yet
    assert timing.decide(10_000.0, 9_260.0) == "ahead"
    assert timing.decide(10_000.0, 9_800.0) == "wait"  # backing off never delays a must
    timing.succeeded()
    assert timing.failed(9_300.0) == 1.0
