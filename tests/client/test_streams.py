"""StreamRef: a stream by name or by ARN, told apart before any call (sans-IO)."""

from __future__ import annotations

import pytest

from kinesis_actors.client import StreamRef, stream_params
from kinesis_actors.errors import ConfigError

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


def test_a_name_is_sent_as_stream_name_and_is_its_own_identity() -> None:
    ref = StreamRef.parse("orders.v2_x-1")
    assert ref == StreamRef("orders.v2_x-1")
    assert ref.params() == {"StreamName": "orders.v2_x-1"}
    assert (ref.arn, ref.region, ref.account) == (None, None, None)
    assert str(ref) == "orders.v2_x-1"


def test_a_stream_arn_is_sent_as_stream_arn_and_known_by_its_name() -> None:
    ref = StreamRef.parse(ARN, region="us-east-1")
    assert ref.name == "orders"
    assert ref.params() == {"StreamARN": ARN}
    assert (ref.region, ref.account) == ("us-east-1", "123456789012")
    assert str(ref) == ARN


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws-cn:kinesis:cn-north-1:123456789012:stream/a",
        "arn:aws-us-gov:kinesis:us-gov-west-1:123456789012:stream/a",
        "arn:aws-iso-b:kinesis:us-isob-east-1:123456789012:stream/a",
        "arn:aws:kinesis:eu-west-1:000000000000:stream/" + "x" * 128,
    ],
)
def test_every_partition_and_the_longest_name_are_accepted(arn: str) -> None:
    assert StreamRef.parse(arn).arn == arn


def test_stream_params_picks_the_parameter_of_a_checked_reference() -> None:
    assert stream_params(ARN) == {"StreamARN": ARN}
    assert stream_params("orders") == {"StreamName": "orders"}


def test_an_arn_of_another_region_than_the_clients_is_refused_saying_which() -> None:
    with pytest.raises(ConfigError) as caught:
        StreamRef.parse(ARN, option="stream", region="eu-west-1")
    message = str(caught.value)
    assert message.startswith("stream: ")
    assert "in region us-east-1, but the client is for eu-west-1" in message
    assert "set the region to us-east-1" in message


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("arn:aws:sqs:us-east-1:123456789012:queue", "another service ('sqs')"),
        ("arn:aws:firehose:us-east-1:123456789012:deliverystream/orders", "another service"),
        (ARN + "/consumer/app:1700000000", "the ARN of a stream's consumer"),
        ("arn:aws:kinesis:us-east-1:12345:stream/orders", "not a Kinesis stream ARN"),
        ("arn:aws:kinesis:us-east-1:123456789012:orders", "not a Kinesis stream ARN"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/", "not a Kinesis stream ARN"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/bad name", "not a Kinesis stream ARN"),
        ("arn:aws:kinesis::123456789012:stream/orders", "not a Kinesis stream ARN"),
        ("arn:other:kinesis:us-east-1:123456789012:stream/orders", "not a Kinesis stream ARN"),
        ("arn:", "not a Kinesis stream ARN"),
    ],
)
def test_a_bad_arn_is_a_config_error_naming_the_option_and_the_problem(
    value: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        StreamRef.parse(value, option="streams", region="us-east-1")
    assert str(caught.value).startswith("streams: ")
    assert says in str(caught.value)


@pytest.mark.parametrize("value", ["", "a b", "x" * 129, "orders/1", "ARN:aws:kinesis"])
def test_a_bad_name_is_a_config_error_that_mentions_both_forms(value: str) -> None:
    with pytest.raises(ConfigError, match="stream must be a stream name of 1 to 128") as caught:
        StreamRef.parse(value)
    assert "or a stream ARN (arn:<partition>:kinesis:" in str(caught.value)


@pytest.mark.parametrize("value", [None, 7, b"orders", ["orders"]])
def test_what_is_no_string_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="streamName must be a stream name of 1 to 128"):
        StreamRef.parse(value, option="streamName")
