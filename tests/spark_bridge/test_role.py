"""``roleArn`` and its companions on the source, the sink and ``partition_writer``, in real
Spark (local mode) against the local Kinesis server and a real STS API (moto's, IAM enforced).

What is checked on the wire: every Kinesis request that went through the fault proxy was
signed with a key STS issued for the role, and STS saw one AssumeRole per Python process per
role, however many tasks the job had.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from kinesis_actors import AssumeRole, LocalKinesis, ProducerConfig, errors
from kinesis_actors.sync import SyncProducer
from spark_bridge import partition_writer
from spark_bridge._options import parse_sink_options, parse_source_options
from spark_bridge._role import assumed_role
from tests.boto import create_stream, read_back
from tests.faults import FaultProxy, Request
from tests.sts import LocalSTS

pytestmark = pytest.mark.local_kinesis

_KEY_ID = re.compile(r"Credential=([A-Z0-9]+)/")
TASKS = 12


class SignedBy:
    """The fault proxy's ``decide``: records the access key id of every request."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, request: Request) -> None:
        found = _KEY_ID.search(request.headers.get("authorization", ""))
        self.keys.append(found.group(1) if found else "unsigned")


def _role_options(sts: LocalSTS, role_arn: str, proxy: FaultProxy) -> dict[str, str]:
    key, secret = sts.allowed
    return {
        "endpointUrl": proxy.endpoint_url,
        "awsAccessKeyId": key,  # what the role is assumed with
        "awsSecretKey": secret,
        "roleArn": role_arn,
        "roleSessionName": "spark-test",
        "roleExternalId": "ext-spark-1",
        "stsEndpoint": sts.endpoint_url,
    }


def _records(local: LocalKinesis, stream: str) -> int:
    return sum(len(records) for records in read_back(local, stream).values())


def test_the_sink_assumes_the_role_once_per_process_not_per_task(
    spark: Any,
    local_kinesis: LocalKinesis,
    local_sts: LocalSTS,
    role_arn: str,
    proxy: FaultProxy,
    stream_name: str,
) -> None:
    create_stream(local_kinesis, stream_name, 2)
    signed = SignedBy()
    proxy.decide = signed
    rows = [(f"row {i}", f"key-{i % 31}") for i in range(1_200)]
    df = spark.createDataFrame(rows, "data string, partitionKey string").repartition(TASKS)
    df.write.format("kinesis").mode("append").option("streamName", stream_name).option(
        "aggregation", "false"
    ).options(**_role_options(local_sts, role_arn, proxy)).save()

    assert _records(local_kinesis, stream_name) == len(rows)
    calls = local_sts.calls(role_arn)
    # The Python processes that open clients: the driver's planner and the local[2]
    # executor's workers, two at a time and reused. One call per task would be 12 or more.
    assert 1 <= len(calls) <= 4, calls
    assert {call.signed_by for call in calls} == {local_sts.allowed[0]}
    assert {(call.session_name, call.external_id) for call in calls} == {
        ("spark-test", "ext-spark-1")
    }
    assert signed.keys and set(signed.keys) <= set(local_sts.issued(role_arn))


def test_partition_writer_makes_one_sts_call_per_worker_process(
    spark: Any,
    local_kinesis: LocalKinesis,
    local_sts: LocalSTS,
    role_arn: str,
    proxy: FaultProxy,
    stream_name: str,
    tmp_path: Path,
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    signed = SignedBy()
    proxy.decide = signed
    writer = partition_writer(
        stream_name, **_role_options(local_sts, role_arn, proxy), aggregation=False
    )
    assert pickle.loads(pickle.dumps(writer)) == writer
    assert len(local_sts.calls(role_arn)) == 1  # the driver's, describing the stream
    processes = tmp_path / "pids"
    processes.mkdir()

    def write(rows: Any) -> None:
        (processes / str(os.getpid())).touch()
        writer(rows)

    rows = [(b"x%d" % i, f"k{i % 7}") for i in range(600)]
    spark.createDataFrame(rows, "data binary, partitionKey string").repartition(
        TASKS
    ).foreachPartition(write)

    assert _records(local_kinesis, stream_name) == len(rows)
    workers = len(list(processes.iterdir()))
    assert 1 <= workers < TASKS
    assert len(local_sts.calls(role_arn)) == 1 + workers
    assert signed.keys and set(signed.keys) <= set(local_sts.issued(role_arn))


def test_the_source_reads_with_the_role(
    spark: Any,
    local_kinesis: LocalKinesis,
    local_sts: LocalSTS,
    role_arn: str,
    proxy: FaultProxy,
    stream_name: str,
    tmp_path: Path,
) -> None:
    create_stream(local_kinesis, stream_name, 4)
    with SyncProducer(
        stream_name,
        endpoint_url=local_kinesis.endpoint_url,
        credentials=local_kinesis.credentials,
        config=ProducerConfig(linger=0.02),
    ) as producer:
        for i in range(400):
            producer.put(b"r-%04d" % i, f"key-{i}")
        producer.flush()
    signed = SignedBy()
    proxy.decide = signed
    options = {"streamName": stream_name, **_role_options(local_sts, role_arn, proxy)}
    query = (
        spark.readStream.format("kinesis")
        .options(**options)
        .load()
        .writeStream.format("memory")
        .queryName("with_role")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    datas = sorted(bytes(row.data) for row in spark.table("with_role").collect())
    assert datas == [b"r-%04d" % i for i in range(400)]
    calls = local_sts.calls(role_arn)
    # The driver's and the planner's processes and the local[2] workers: a handful, however
    # many tasks (4 shards, each read in every micro-batch).
    assert 1 <= len(calls) <= 5, calls
    assert signed.keys and set(signed.keys) <= set(local_sts.issued(role_arn))


def test_a_role_sts_refuses_fails_the_write_on_the_driver_naming_it(
    spark: Any,
    local_kinesis: LocalKinesis,
    local_sts: LocalSTS,
    role_arn: str,
    proxy: FaultProxy,
    stream_name: str,
) -> None:
    create_stream(local_kinesis, stream_name, 1)
    options = _role_options(local_sts, role_arn, proxy)
    options["awsAccessKeyId"], options["awsSecretKey"] = local_sts.denied
    with pytest.raises(errors.AssumeRoleError) as raised:
        partition_writer(stream_name, **options)
    assert raised.value.code == "AccessDenied" and role_arn in str(raised.value)
    assert [call.status for call in local_sts.calls(role_arn)] == [403]
    assert local_sts.denied[1] not in str(raised.value)
    assert "ext-spark-1" not in str(raised.value)


# Options, without Spark ------------------------------------------------------------------

ARN = "arn:aws:iam::111122223333:role/reader"


def test_role_options_reach_the_connection_and_stay_out_of_its_repr() -> None:
    parsed = parse_sink_options(
        {
            "streamName": "s",
            "ROLEARN": ARN,
            "roleExternalId": "ext-hidden-77",
            "stsEndpoint": "https://sts.eu-west-1.amazonaws.com",
            "stsRegion": "eu-west-1",
            "awsAccessKeyId": "AKID",
            "awsSecretKey": "secret-hidden-88",
        }
    )
    role = parsed.connection.role
    assert role is not None
    assert (role.role_arn, role.session_name, role.sts_region) == (
        ARN,
        "kinesis-actors",
        "eu-west-1",
    )
    assert role.external_id == "ext-hidden-77"
    assert "ext-hidden-77" not in repr(parsed) and "secret-hidden-88" not in repr(parsed)
    assert pickle.loads(pickle.dumps(parsed)) == parsed
    credentials = parsed.connection.client_kwargs()["credentials"]
    assert isinstance(credentials, AssumeRole)
    assert credentials.sts_region == "eu-west-1" and credentials.role_arn == ARN
    assert "ext-hidden-77" not in repr(credentials)


def test_one_session_per_process_per_role_and_base_credentials() -> None:
    options = {"streamName": "s", "roleArn": ARN, "region": "eu-west-1"}
    first = parse_source_options(options).connection.client_kwargs()["credentials"]
    again = parse_source_options(options).connection.client_kwargs()["credentials"]
    assert first is again
    assert first.sts_region == "eu-west-1"  # the connection's region, without stsRegion
    other = parse_source_options({**options, "roleSessionName": "other"}).connection
    keys = parse_source_options({**options, "awsAccessKeyId": "a", "awsSecretKey": "b"})
    assert other.client_kwargs()["credentials"] is not first
    assert keys.connection.client_kwargs()["credentials"] is not first
    role = parse_source_options(options).connection.role
    assert role is not None
    assert assumed_role(role, None, "eu-west-1") is first


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"roleArn": "arn:aws:iam::1:user/x"}, "option roleArn"),
        ({"roleArn": ARN, "roleSessionName": "a b"}, "option roleSessionName"),
        ({"roleArn": ARN, "roleExternalId": "has space"}, "option roleExternalId"),
        ({"roleArn": ARN, "stsEndpoint": "sts.local"}, "option stsEndpoint"),
        ({"roleArn": ARN, "stsRegion": ""}, "option stsRegion"),
        ({"stsEndpoint": "https://sts.local"}, "option stsEndpoint needs roleArn"),
        ({"roleExternalId": "x1"}, "option roleExternalId needs roleArn"),
    ],
)
def test_bad_role_options_fail_naming_the_option(options: dict[str, str], named: str) -> None:
    for parse in (parse_sink_options, parse_source_options):
        with pytest.raises(errors.ConfigError) as raised:
            parse({"streamName": "s", **options})
        assert str(raised.value).startswith(named), str(raised.value)
    with pytest.raises(errors.ConfigError) as raised:
        partition_writer("s", **options)
    assert named in str(raised.value)
