"""Fixtures shared by the whole suite.

Async tests run on both anyio backends (asyncio and trio) through anyio's own pytest plugin.
Tests that need Kinesis talk to one real local server (kinesis-mock) started for the run;
tests that need DynamoDB (lease tables) to one real local DynamoDB (dynalite), likewise;
tests that assume a role to one real STS API (moto's server, IAM enforced: ``tests/sts.py``).

``make test`` runs the suite on two pytest-xdist workers (``--dist loadfile``): each worker
starts its own servers, and a file's tests stay on one worker, so a module's server (Spark
Connect, the Spark cluster) starts once.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import settings

from kinesis_actors import DynamoDBClient, KinesisClient, LocalDynamoDB, LocalKinesis
from tests.faults import FaultProxy
from tests.sts import LocalSTS
from tests.unreachable import Unreachable, unreachable

# No per-example deadline: Hypothesis's default (200 ms) measures the machine's load, not
# the code (25 of 27 property tests kept it, and a loaded 2-core machine exceeds it with no
# bug). Examples stay bounded by ``max_examples`` and the tests' own hang guards.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def local_kinesis() -> Iterator[LocalKinesis]:
    """One local Kinesis server for the whole run, on free loopback ports.

    Its account-wide shard limit is raised far above LocalKinesis's default (1,000): the run
    creates more shards than that in all (streams are not deleted after each test), and the
    late tests then failed on LimitExceeded at CreateStream and SplitShard.
    """
    with LocalKinesis(shard_limit=50_000) as server:
        yield server


@pytest.fixture
async def client(local_kinesis: LocalKinesis) -> AsyncIterator[KinesisClient]:
    """A client on the server's TLS port, speaking HTTP/2."""
    async with local_kinesis.client(tls=True) as kinesis:
        yield kinesis


@pytest.fixture(scope="session")
def local_dynamodb() -> Iterator[LocalDynamoDB]:
    """One local DynamoDB (in memory) for the whole run, on a free loopback port."""
    with LocalDynamoDB() as server:
        yield server


@pytest.fixture
async def dynamodb(local_dynamodb: LocalDynamoDB) -> AsyncIterator[DynamoDBClient]:
    """A DynamoDB client on the local server."""
    async with local_dynamodb.client() as client:
        yield client


@pytest.fixture(scope="session")
def local_sts() -> Iterator[LocalSTS]:
    """moto's STS on a free loopback port with IAM enforced, for the whole run."""
    with LocalSTS() as server:
        yield server


@pytest.fixture
def role_arn() -> str:
    """A role of another account that no other test assumes (calls are counted per role)."""
    return f"arn:aws:iam::111122223333:role/reader-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def lease_table_name() -> str:
    """A table name no other test uses (the server lives for the whole run)."""
    return f"leases-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def proxy(local_kinesis: LocalKinesis) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the server's plain port (see ``tests/faults.py``)."""
    with FaultProxy(local_kinesis.plain_port) as running:
        yield running


@pytest.fixture
def stream_name() -> str:
    """A stream name no other test uses (the server lives for the whole run)."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["refusing_port", "blackhole"])
def unreachable_endpoint(request: pytest.FixtureRequest) -> Iterator[Unreachable]:
    """An endpoint that cannot be reached, once per fault: a port that refuses connections,
    and a blackhole (a listener that accepts and never answers)."""
    with unreachable(str(request.param)) as endpoint:
        yield endpoint
