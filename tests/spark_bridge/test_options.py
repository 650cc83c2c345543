"""The ``kinesis`` data source's options and Arrow schema: no Spark session, no server."""

from __future__ import annotations

import logging
import pickle
import re
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from kinesis_actors.client import ClientConfig
from kinesis_actors.errors import ConfigError
from kinesis_actors.records import RECORD_SCHEMA, Aggregator, build_record_batch
from spark_bridge._datasource import KinesisDataSource
from spark_bridge._options import (
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    SPELLING,
    Connection,
    SinkOptions,
    SourceOptions,
    parse_connection,
    parse_sink_options,
    parse_source_options,
    spelled,
)
from spark_bridge._schema import SPARK_ARROW_SCHEMA, spark_schema, to_spark_batch
from spark_bridge._sink import producer_config
from spark_bridge._source import KinesisStreamReader


def source(**options: str) -> SourceOptions:
    return parse_source_options({"streamName": "orders", **options})


def sink(**options: str) -> SinkOptions:
    return parse_sink_options({"streamName": "orders", **options})


def fails(option: str) -> AbstractContextManager[pytest.ExceptionInfo[ConfigError]]:
    """A ConfigError whose message names ``option`` (as the user spells it)."""
    return pytest.raises(ConfigError, match=re.escape(option))


# --- streamName ----------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"streamName": ""}, {"streamName": "   "}])
def test_stream_name_is_required(options: dict[str, str]) -> None:
    with fails("streamName"):
        parse_source_options(options)
    with fails("streamName"):
        parse_sink_options(options)


@pytest.mark.parametrize("raw", ["a,,b", "a,", ",a", "a, ,b"])
def test_stream_name_rejects_an_empty_name_in_a_list(raw: str) -> None:
    with fails("streamName"):
        source(streamName=raw)


@pytest.mark.parametrize("raw", ["a,a", "a, b ,a", " a ,a "])
def test_stream_name_rejects_a_duplicate(raw: str) -> None:
    with fails("streamName"):
        source(streamName=raw)


def test_stream_name_comma_list_is_split_and_stripped_in_order() -> None:
    assert source(streamName=" b , a,c ").streams == ("b", "a", "c")
    assert source(streamName="orders").streams == ("orders",)


ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


def test_stream_name_takes_arns_known_by_their_names_and_called_by_their_arns() -> None:
    options = source(streamName=f"clicks, {ARN}")
    assert options.streams == ("clicks", "orders")  # offsets and rows: the names
    assert options.ref("orders") == ARN and options.ref("clicks") == "clicks"
    assert pickle.loads(pickle.dumps(options)) == options  # it travels to executors
    assert source(streamName="a,b").refs == ()  # by name only: as before
    assert sink(streamName=ARN).stream == ARN  # the sink's producer takes it as given


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("arn:aws:kinesis:us-east-1:12345:stream/orders", "not a Kinesis stream ARN"),
        ("arn:aws:sqs:us-east-1:123456789012:orders", "the ARN of another service"),
        (ARN + "/consumer/app:1700000000", "the ARN of a stream's consumer"),
        (f"orders,{ARN}", "names a stream twice"),
        ("bad name", "must be a stream name of 1 to 128"),
    ],
)
def test_a_bad_stream_arn_fails_naming_stream_name(raw: str, says: str) -> None:
    with pytest.raises(ConfigError, match="option streamName") as caught:
        source(streamName=raw)
    assert says in str(caught.value)
    with pytest.raises(ConfigError, match="option streamName"):
        sink(streamName=raw)


def test_an_arn_of_another_region_than_the_option_region_fails_saying_so() -> None:
    with fails("is in region us-east-1, but the client is for eu-west-1"):
        source(streamName=ARN, region="eu-west-1")
    with fails("is in region us-east-1, but the client is for eu-west-1"):
        sink(streamName=ARN, region="eu-west-1")
    assert source(streamName=ARN.replace("us-east-1", "eu-west-1"), region="eu-west-1").streams


def test_path_names_the_stream_and_option_names_are_case_insensitive() -> None:
    assert parse_source_options({"path": "x,y"}).streams == ("x", "y")
    assert parse_source_options({"STREAMNAME": "x", "REGION": "eu-west-1"}).streams == ("x",)
    assert parse_source_options({"streamname": "x", "Region": "eu-west-1"}).connection == (
        Connection(region="eu-west-1")
    )


def test_sink_writes_to_exactly_one_stream() -> None:
    with fails("streamName"):
        sink(streamName="a,b")
    assert sink(streamName=" a ").stream == "a"


# --- connection ----------------------------------------------------------------------------


@pytest.mark.parametrize("region", ["", "  "])
def test_region_must_not_be_empty(region: str) -> None:
    with fails("region"):
        source(region=region)
    with fails("region"):
        sink(region=region)
    with fails("region"):
        parse_connection({"region": region})


def test_region_is_stripped() -> None:
    assert source(region=" eu-central-1 ").connection.region == "eu-central-1"


@pytest.mark.parametrize("url", ["localhost:4567", "ftp://host", "HTTPS//host", "", "ws://h"])
def test_endpoint_url_needs_an_http_scheme(url: str) -> None:
    with fails("endpointUrl"):
        source(endpointUrl=url)
    with fails("endpointUrl"):
        sink(endpointUrl=url)


@pytest.mark.parametrize("url", ["http://localhost:4567", "https://kinesis.example.com"])
def test_endpoint_url_accepts_http_and_https(url: str) -> None:
    assert source(endpointUrl=url).connection.endpoint_url == url


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
        ("1", True),
        ("false", False),
        ("False", False),
        ("no", False),
        ("0", False),
    ],
)
def test_verify_ssl_values(raw: str, expected: bool) -> None:
    assert source(verifySsl=raw).connection.verify is expected
    assert sink(verifySsl=raw).connection.verify is expected


@pytest.mark.parametrize("raw", ["", "maybe", "2", "on", "y"])
def test_verify_ssl_rejects_other_values(raw: str) -> None:
    with fails("verifySsl"):
        source(verifySsl=raw)
    with fails("verifySsl"):
        sink(verifySsl=raw)


def test_access_key_without_secret_is_an_error() -> None:
    for options in ({"awsAccessKeyId": "AKID"}, {"awsSecretKey": "secret"}):
        with pytest.raises(ConfigError) as raised:
            source(**options)
        assert "awsAccessKeyId" in str(raised.value)
        assert "awsSecretKey" in str(raised.value)
        with fails("awsSecretKey"):
            sink(**options)


def test_session_token_alone_is_an_error() -> None:
    with fails("sessionToken"):
        source(sessionToken="token")
    with fails("sessionToken"):
        sink(sessionToken="token")


def test_credentials_pair_and_triple() -> None:
    assert source().connection.credentials is None
    pair = source(awsAccessKeyId="AKID", awsSecretKey="secret")
    assert pair.connection.credentials == ("AKID", "secret")
    triple = sink(awsAccessKeyId="AKID", awsSecretKey="secret", sessionToken="token")
    assert triple.connection.credentials == ("AKID", "secret", "token")


def test_connection_defaults_and_client_kwargs() -> None:
    connection = source().connection
    assert connection == Connection()
    assert connection.client_kwargs() == {
        "region": "us-east-1",
        "endpoint_url": None,
        "verify": True,
        "credentials": None,
        "config": ClientConfig(open_timeout=30.0),
    }
    custom = parse_connection(
        {
            "region": "eu-west-1",
            "endpointUrl": "https://localhost:4567",
            "verifySsl": "false",
            "awsAccessKeyId": "k",
            "awsSecretKey": "s",
        }
    )
    assert custom.client_kwargs() == {
        "region": "eu-west-1",
        "endpoint_url": "https://localhost:4567",
        "verify": False,
        "credentials": ("k", "s"),
        "config": ClientConfig(open_timeout=30.0),
    }


# --- consumer mode and registration --------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [("polling", "polling"), (" EFO ", "efo")])
def test_consumer_mode_choices(raw: str, expected: str) -> None:
    assert source(consumerMode=raw).mode == expected


@pytest.mark.parametrize("raw", ["", "kcl", "fanout", "push"])
def test_consumer_mode_rejects_other_values(raw: str) -> None:
    with fails("consumerMode"):
        source(consumerMode=raw)


@pytest.mark.parametrize("raw", ["lazy", "eager", "none", "EAGER"])
def test_registration_choices(raw: str) -> None:
    assert source(registration=raw).registration == raw.lower()


@pytest.mark.parametrize("raw", ["", "always", "never"])
def test_registration_rejects_other_values(raw: str) -> None:
    with fails("registration"):
        source(registration=raw)


def test_efo_takes_what_polling_takes_since_both_read_with_get_records() -> None:
    """The source subscribes to nothing in either mode, so consumerMode=efo refuses neither
    registration=none nor an http endpoint (SubscribeToShard's needs)."""
    efo = source(consumerMode="efo", registration="none", endpointUrl="http://localhost:4567")
    assert (efo.mode, efo.registration, efo.connection.endpoint_url) == (
        "efo",
        "none",
        "http://localhost:4567",
    )
    assert source(consumerMode="polling", registration="none").registration == "none"


def test_efo_is_accepted_and_the_source_says_it_reads_with_get_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = {"streamName": "orders", "consumerMode": "efo", "consumerName": "app"}
    with caplog.at_level(logging.WARNING, logger="spark_bridge.source"):
        reader = KinesisDataSource(options).streamReader(spark_schema())
    assert isinstance(reader, KinesisStreamReader)
    assert any("registers no EFO consumer" in record.getMessage() for record in caplog.records)


def test_consumer_name_must_not_be_empty() -> None:
    with fails("consumerName"):
        source(consumerName="  ")
    assert source(consumerName=" app ").consumer_name == "app"


# --- initialPosition -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("trim_horizon", "trim_horizon"),
        ("TRIM_HORIZON", "trim_horizon"),
        ("earliest", "trim_horizon"),
        (" latest ", "latest"),
        ("LATEST", "latest"),
    ],
)
def test_initial_position_names(raw: str, expected: str) -> None:
    options = source(initialPosition=raw)
    assert (options.initial_position, options.initial_timestamp) == (expected, None)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("at_timestamp:2024-01-31T12:00:00Z", datetime(2024, 1, 31, 12, tzinfo=UTC)),
        ("AT_TIMESTAMP:2024-01-31T12:00:00.250Z", datetime(2024, 1, 31, 12, 0, 0, 250_000, UTC)),
        ("at_timestamp:2024-01-31T12:00:00", datetime(2024, 1, 31, 12, tzinfo=UTC)),
        (
            "at_timestamp:2024-01-31T14:00:00+02:00",
            datetime(2024, 1, 31, 14, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("at_timestamp:2024-01-31", datetime(2024, 1, 31, tzinfo=UTC)),
    ],
)
def test_initial_position_at_timestamp(raw: str, expected: datetime) -> None:
    options = source(initialPosition=raw)
    assert options.initial_position == "at_timestamp"
    assert options.initial_timestamp == expected
    assert options.initial_timestamp is not None
    assert options.initial_timestamp.tzinfo is not None


@pytest.mark.parametrize(
    "raw",
    ["at_timestamp:", "at_timestamp:yesterday", "at_timestamp:2024-13-01T00:00:00Z", "at_ts:x"],
)
def test_initial_position_rejects_a_bad_timestamp(raw: str) -> None:
    with fails("initialPosition"):
        source(initialPosition=raw)


def test_initial_position_rejects_a_timestamp_in_the_future() -> None:
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with pytest.raises(ConfigError, match=r"initialPosition.*future"):
        source(initialPosition=f"at_timestamp:{future}")


@pytest.mark.parametrize("raw", ["", "oldest", "trim horizon", "at_sequence_number:1"])
def test_initial_position_rejects_other_values(raw: str) -> None:
    with fails("initialPosition"):
        source(initialPosition=raw)


# --- limits --------------------------------------------------------------------------------

SOURCE_INTS = {
    "maxRecordsPerTrigger": "max_records_per_trigger",
    "maxBytesPerTrigger": "max_bytes_per_trigger",
    "shardsPerTask": "shards_per_task",
}
BAD_INTS = ["0", "-1", "", "abc", "1.5", "1e3", "nan"]
BAD_FLOATS = ["0", "-0.5", "", "abc", "nan", "inf", "-inf"]


@pytest.mark.parametrize("option", sorted(SOURCE_INTS))
@pytest.mark.parametrize("raw", BAD_INTS)
def test_source_limits_must_be_positive_integers(option: str, raw: str) -> None:
    with fails(option):
        source(**{option: raw})


@pytest.mark.parametrize(("option", "field"), sorted(SOURCE_INTS.items()))
def test_source_limits_accept_positive_integers(option: str, field: str) -> None:
    assert getattr(source(**{option: " 7 "}), field) == 7


def test_shards_per_task_is_automatic_unless_given() -> None:
    assert source().shards_per_task is None


@pytest.mark.parametrize("raw", BAD_FLOATS)
def test_replay_timeout_must_be_a_positive_number(raw: str) -> None:
    with fails("replayTimeout"):
        source(replayTimeout=raw)


@pytest.mark.parametrize(("raw", "expected"), [("2.5", 2.5), ("30", 30.0), (" 1e-3 ", 0.001)])
def test_replay_timeout_accepts_positive_numbers(raw: str, expected: float) -> None:
    assert source(replayTimeout=raw).replay_timeout == expected


@pytest.mark.parametrize("raw", BAD_FLOATS)
def test_max_fetch_rate_must_be_a_positive_number(raw: str) -> None:
    with fails("maxFetchRate"):
        source(maxFetchRate=raw)


def test_max_fetch_rate_is_in_mb_a_second_and_off_by_default() -> None:
    assert source().max_fetch_rate is None
    assert source(maxFetchRate="1.5").max_fetch_rate == 1_500_000


def test_deregister_consumer() -> None:
    assert source(deregisterConsumer="true").deregister_consumer is True
    with fails("deregisterConsumer"):
        source(deregisterConsumer="sometimes")


def test_source_defaults() -> None:
    assert source() == SourceOptions(
        streams=("orders",),
        connection=Connection(region="us-east-1", endpoint_url=None, verify=True, credentials=None),
        mode="polling",
        consumer_name=None,
        registration="lazy",
        initial_position="trim_horizon",
        initial_timestamp=None,
        max_records_per_trigger=None,
        max_bytes_per_trigger=None,
        replay_timeout=120.0,
        deregister_consumer=False,
        window_ms=10_000,
        settle_ms=1_000,
    )


@pytest.mark.parametrize(
    ("raw", "expected_ms"),
    [
        ("10", 10_000),
        ("2.5s", 2_500),
        ("500ms", 500),
        ("2m", 120_000),
        ("1h", 3_600_000),
        (" 3 s ", 3_000),
        ("0.0001", 1),
    ],
)
@pytest.mark.parametrize(
    ("option", "field"), [("arrivalWindowPerTrigger", "window_ms"), ("settleLag", "settle_ms")]
)
def test_durations_take_seconds_or_a_unit(
    option: str, field: str, raw: str, expected_ms: int
) -> None:
    assert getattr(source(**{option: raw}), field) == expected_ms


@pytest.mark.parametrize("raw", ["0", "-1s", "", "soon", "10 days", "inf", "nan"])
@pytest.mark.parametrize("option", ["arrivalWindowPerTrigger", "settleLag"])
def test_durations_must_be_positive(option: str, raw: str) -> None:
    with fails(option):
        source(**{option: raw})


def test_read_path_driver_was_removed_and_says_why_and_what_to_do() -> None:
    with pytest.raises(ConfigError, match="option readPath=driver was removed") as raised:
        source(readPath="Driver", startingPositions="not even json")  # before any other check
    message = str(raised.value)
    assert "Drop the option" in message and "checkpoint written with it resumes" in message
    assert "readPath=driver (removed)" in message  # the docs/spark.md paragraph
    assert source(readPath=" Executors ") == source()  # what every query does: a no-op
    with fails("readPath"):
        source(readPath="both")


@pytest.mark.parametrize("option", ["maxStagedRecords", "maxStagedBytes"])
def test_the_driver_paths_staging_options_were_removed_with_it(option: str) -> None:
    with pytest.raises(ConfigError, match=f"option {option} was removed with readPath=driver"):
        source(**{option: "1000"})


# --- unknown options -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["maxRecordsPerBatch", "streamNames", "aggregation"])
def test_unknown_source_option_is_named(name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        source(**{name: "1"})
    assert name.lower() in str(raised.value).lower()


@pytest.mark.parametrize("name", ["consumerMode", "initialPosition", "queueLimit", "bogus"])
def test_unknown_sink_option_is_named(name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        sink(**{name: "1"})
    assert name.lower() in str(raised.value).lower()


def test_unknown_options_are_checked_before_the_stream_name() -> None:
    with pytest.raises(ConfigError, match="bogus"):
        parse_source_options({"bogus": "1"})


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("initalposition", "initialPosition"),  # as Spark hands it over: lowercased
        ("initalPosition", "initialPosition"),
        ("maxRecordsPerBatch", "maxRecordsPerTrigger"),
        ("endpoint_url", "endpointUrl"),
        ("verify", "verifySsl"),
        ("shardPerTask", "shardsPerTask"),
    ],
)
def test_an_unknown_source_option_gets_the_closest_name_as_documented(
    typo: str, meant: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        source(**{typo: "1"})
    first = str(raised.value).splitlines()[0]
    assert f"unknown source option '{typo.lower()}'; did you mean '{meant}'?" in first


def test_an_unknown_option_far_from_any_gets_no_guess_but_the_list() -> None:
    with pytest.raises(ConfigError) as raised:
        sink(bogus="1")
    message = str(raised.value)
    assert "did you mean" not in message
    assert "'bogus'" in message
    # The list is the reference for a user without a checkout: every sink option, as spelt.
    listed = message.rsplit("options: ", 1)[1].split(", ")
    assert listed == sorted(spelled(name) for name in SINK_OPTIONS if name != "path")
    assert "queueLimitRecords" in listed and "docs/spark.md" not in message


def test_every_known_option_has_its_documented_spelling() -> None:
    """A new option added to the sets without its camelCase spelling would be named
    lowercased in messages."""
    for name in SOURCE_OPTIONS | SINK_OPTIONS:
        assert spelled(name).lower() == name
        assert spelled(name) in SPELLING.values()


# --- sink ----------------------------------------------------------------------------------


def test_sink_defaults() -> None:
    assert sink() == SinkOptions(
        stream="orders",
        connection=Connection(),
        aggregation=True,
        queue_limit_records=10_000,
        flush_timeout=300.0,
    )


def test_the_sinks_producer_keeps_the_queue_floor_whatever_the_shards() -> None:
    """A producer per core in Python workers: the sink's queue is 10,000 records and 8 MiB,
    not the producer's default sized by the stream's shards (64 MiB at 1,024)."""
    config = producer_config(sink())
    assert (config.queue_limit_records, config.queue_limit_bytes) == (10_000, 8 * 1024 * 1024)
    config = producer_config(sink(queueLimitRecords="50000"))
    assert (config.queue_limit_records, config.queue_limit_bytes) == (50_000, 8 * 1024 * 1024)


def test_sink_accepts_spark_paths_and_checkpoint_location() -> None:
    options = parse_sink_options({"path": "orders", "checkpointLocation": "/tmp/cp"})
    assert options.stream == "orders"


def test_sink_options() -> None:
    options = sink(
        aggregation="false", queueLimitRecords="5", flushTimeout="1.5", region="ap-south-1"
    )
    assert (options.aggregation, options.queue_limit_records, options.flush_timeout) == (
        False,
        5,
        1.5,
    )
    assert options.connection.region == "ap-south-1"


@pytest.mark.parametrize("raw", BAD_INTS)
def test_sink_queue_limit_must_be_a_positive_integer(raw: str) -> None:
    with fails("queueLimitRecords"):
        sink(queueLimitRecords=raw)


@pytest.mark.parametrize("raw", BAD_FLOATS)
def test_sink_flush_timeout_must_be_a_positive_number(raw: str) -> None:
    with fails("flushTimeout"):
        sink(flushTimeout=raw)


def test_sink_aggregation_must_be_a_boolean() -> None:
    with fails("aggregation"):
        sink(aggregation="sometimes")


def test_options_pickle() -> None:
    # They travel to executors inside partitions and writers.
    full = source(
        streamName="a,b",
        awsAccessKeyId="k",
        awsSecretKey="s",
        sessionToken="t",
        initialPosition="at_timestamp:2024-01-31T12:00:00Z",
        maxRecordsPerTrigger="9",
    )
    assert pickle.loads(pickle.dumps(full)) == full
    out = sink(flushTimeout="2")
    assert pickle.loads(pickle.dumps(out)) == out


# --- the Spark Arrow schema ----------------------------------------------------------------


def _records_batch() -> pa.RecordBatch:
    aggregator = Aggregator()
    assert aggregator.add(b"first", "pk-a")
    assert aggregator.add(b"second", "pk-b", "12345")
    aggregate = aggregator.build()
    records = [
        {
            "SequenceNumber": "49590338271490256608559692538361571095921575989136588898",
            "ApproximateArrivalTimestamp": datetime(2024, 1, 31, 12, 0, 0, 123_000, UTC),
            "Data": b"\x00plain",
            "PartitionKey": "pk",
        },
        {
            "SequenceNumber": "49590338271490256608559692538361571095921575989136588899",
            "ApproximateArrivalTimestamp": datetime(2024, 1, 31, 12, 0, 1, 999_000, UTC),
            "Data": aggregate.data,
            "PartitionKey": aggregate.partition_key,
            "ExplicitHashKey": aggregate.explicit_hash_key,
        },
    ]
    return build_record_batch("orders", "shardId-000000000001", records).batch


def test_spark_arrow_schema_is_what_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    expected = to_arrow_schema(spark_schema(), timezone="UTC")
    assert SPARK_ARROW_SCHEMA.equals(expected, check_metadata=True)
    converted = to_spark_batch(_records_batch())
    assert converted.schema.equals(expected, check_metadata=True)


def test_spark_schema_columns() -> None:
    schema = spark_schema()
    assert schema.fieldNames() == [
        "stream",
        "shardId",
        "sequenceNumber",
        "subSequenceNumber",
        "partitionKey",
        "explicitHashKey",
        "approximateArrivalTimestamp",
        "data",
    ]
    nullable = [field.nullable for field in schema.fields]
    assert nullable == [field.nullable for field in RECORD_SCHEMA]
    assert [field.name for field in schema.fields if field.nullable] == ["explicitHashKey"]


def test_to_spark_batch_preserves_values() -> None:
    original = _records_batch()
    assert original.num_rows == 3
    converted = to_spark_batch(original)

    assert converted.num_rows == original.num_rows
    for index, name in enumerate(converted.schema.names):
        if name == "approximateArrivalTimestamp":
            continue
        assert converted.column(index).to_pylist() == original.column(index).to_pylist(), name
    assert converted.column("explicitHashKey").to_pylist() == [None, None, "12345"]
    assert converted.column("subSequenceNumber").to_pylist() == [0, 0, 1]

    millis = original.column(6).cast(pa.int64()).to_pylist()
    micros = converted.column("approximateArrivalTimestamp").cast(pa.int64()).to_pylist()
    assert micros == [value * 1000 for value in millis]
    assert converted.column("approximateArrivalTimestamp").to_pylist() == [
        datetime(2024, 1, 31, 12, 0, 0, 123_000, UTC),
        datetime(2024, 1, 31, 12, 0, 1, 999_000, UTC),
        datetime(2024, 1, 31, 12, 0, 1, 999_000, UTC),
    ]


def test_to_spark_batch_of_an_empty_batch() -> None:
    empty = pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)
    converted = to_spark_batch(empty)
    assert converted.num_rows == 0
    assert converted.schema == SPARK_ARROW_SCHEMA


# --- secrets -------------------------------------------------------------------------------


def test_no_secret_in_the_repr_of_any_options_object() -> None:
    """One log line with the options must not leak the key."""
    secret, token = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "FwoGZXIvYXdzEXAMPLETOKEN"
    given = {"awsAccessKeyId": "AKIDEXAMPLE", "awsSecretKey": secret, "sessionToken": token}
    for options in (source(**given), sink(**given), parse_connection(given)):
        text = f"{options!r} {options!s}"
        assert secret not in text
        assert token not in text
        connection = options if isinstance(options, Connection) else options.connection
        assert connection.credentials == ("AKIDEXAMPLE", secret, token)  # kept, just not shown
        assert pickle.loads(pickle.dumps(options)) == options  # still shipped to executors


# --- openTimeout ---------------------------------------------------------------------------


def test_open_timeout_reaches_the_clients_of_the_source_and_the_sink() -> None:
    assert source().connection.open_timeout == 30.0
    for options in (source(openTimeout="2.5"), sink(opentimeout="2.5")):
        assert options.connection.open_timeout == 2.5
        assert options.connection.client_kwargs()["config"].open_timeout == 2.5
    assert pickle.loads(pickle.dumps(source(openTimeout="5"))).connection.open_timeout == 5.0


@pytest.mark.parametrize("raw", BAD_FLOATS)
def test_open_timeout_must_be_a_positive_number(raw: str) -> None:
    with fails("openTimeout"):
        source(openTimeout=raw)
    with fails("openTimeout"):
        sink(openTimeout=raw)


def test_a_misspelt_open_timeout_is_pointed_at_the_right_name() -> None:
    with fails("did you mean 'openTimeout'"):
        source(openTimeot="5")
