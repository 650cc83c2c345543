"""First contact with an endpoint, sans-IO: when a failure to reach it is said, how long each
attempt may wait, and when a call gives up; driven with a virtual clock, no loop."""

from __future__ import annotations

import socket
import ssl

import pytest

from kinesis_actors import errors
from kinesis_actors.client import ClientConfig
from kinesis_actors.client._contact import (
    FIRST_CONTACT_ATTEMPT,
    FirstContact,
    cause_in_words,
)

URL = "http://127.0.0.1:1"


def _refused() -> errors.TransportError:
    try:
        raise OSError("All connection attempts failed") from ConnectionRefusedError(
            111, "Connect call failed"
        )
    except OSError as exc:
        try:
            raise errors.TransportError("ConnectError: refused", operation="ListShards") from exc
        except errors.TransportError as typed:
            return typed


def test_the_first_failure_is_warned_once_naming_the_endpoint_the_cause_and_the_bound() -> None:
    contact = FirstContact(URL, "kinesis", open_timeout=30.0)
    assert contact.attempt_timeout(100.0) == FIRST_CONTACT_ATTEMPT
    first = contact.failed(_refused(), "DescribeStreamSummary", 1.5, 100.0)
    assert first.warning == (
        "cannot reach Kinesis at http://127.0.0.1:1 (connection refused); "
        "retrying for up to 30 s (open_timeout)"
    )
    assert first.give_up is None and first.delay == 1.5
    second = contact.failed(_refused(), "DescribeStreamSummary", 1.5, 102.0)
    assert second.warning is None and second.delay == 1.5


def test_retries_of_a_refused_endpoint_give_up_at_open_timeout_after_the_first_attempt() -> None:
    contact = FirstContact(URL, "kinesis", open_timeout=30.0)
    contact.attempt_timeout(100.0)
    near = contact.failed(_refused(), "DescribeStreamSummary", 5.0, 128.0)
    assert near.delay == pytest.approx(2.0)  # no sleep past the deadline
    verdict = contact.failed(_refused(), "DescribeStreamSummary", 5.0, 130.0)
    unreachable = verdict.give_up
    assert isinstance(unreachable, errors.EndpointUnreachableError)
    assert isinstance(unreachable, errors.TransportError)
    assert unreachable.endpoint == URL and unreachable.cause == "connection refused"
    assert str(unreachable).startswith(
        "DescribeStreamSummary: cannot reach Kinesis at http://127.0.0.1:1 (connection refused)"
    )
    assert "open_timeout=30" in str(unreachable)


def test_a_call_after_one_that_gave_up_gets_a_full_open_timeout_and_a_warning_again() -> None:
    """A client kept for a process's life (a Spark worker's) is not left with one second and
    silence for every later call once a first one gave up."""
    contact = FirstContact(URL, "kinesis", open_timeout=30.0)
    contact.attempt_timeout(100.0)
    contact.failed(_refused(), "ListShards", 5.0, 101.0)
    assert contact.failed(_refused(), "ListShards", 5.0, 130.0).give_up is not None
    assert contact.attempt_timeout(500.0) == FIRST_CONTACT_ATTEMPT  # not the last second
    again = contact.failed(_refused(), "ListShards", 5.0, 501.0)
    assert again.give_up is None and again.delay == 5.0
    assert again.warning is not None and "retrying for up to 29 s" in again.warning


def test_retries_used_up_before_open_timeout_give_up_as_unreachable_too() -> None:
    contact = FirstContact(URL, "dynamodb", open_timeout=30.0)
    contact.attempt_timeout(0.0)
    verdict = contact.failed(_refused(), "DescribeTable", None, 0.8)
    assert verdict.warning is None  # the error says it at once
    assert verdict.give_up is not None
    assert "cannot reach DynamoDB at" in str(verdict.give_up)
    assert "retries of DescribeTable used up" in str(verdict.give_up)


def test_after_one_reply_failures_are_left_to_the_retry_policy() -> None:
    contact = FirstContact(URL, "kinesis", open_timeout=1.0)
    contact.attempt_timeout(0.0)
    contact.answered()
    assert contact.attempt_timeout(50.0) is None
    verdict = contact.failed(_refused(), "GetRecords", 0.3, 50.0)
    assert verdict.warning is None and verdict.give_up is None and verdict.delay == 0.3
    assert contact.failed(_refused(), "GetRecords", None, 50.0).give_up is None


def test_replies_that_are_errors_and_certificate_failures_are_not_unreachability() -> None:
    contact = FirstContact(URL, "kinesis", open_timeout=1.0)
    contact.attempt_timeout(0.0)
    for error in (
        errors.ThrottlingError("slow down"),
        errors.CertificateError("CERTIFICATE_VERIFY_FAILED"),
    ):
        verdict = contact.failed(error, "ListShards", None, 5.0)
        assert verdict.give_up is None and verdict.warning is None


def test_each_attempt_before_contact_waits_less_as_the_deadline_nears() -> None:
    contact = FirstContact(URL, "kinesis", open_timeout=8.0)
    assert contact.attempt_timeout(0.0) == FIRST_CONTACT_ATTEMPT
    assert contact.attempt_timeout(6.5) == pytest.approx(1.5)
    assert contact.attempt_timeout(7.9) == 1.0  # the least an attempt is given
    # Half of a small open_timeout: the first failure is said before the call gives up.
    assert FirstContact(URL, "kinesis", open_timeout=2.0).attempt_timeout(0.0) == 1.0


def test_a_proxy_in_the_way_is_named_in_the_cause() -> None:
    error = _refused()
    error.message = "ConnectError: refused (through the proxy 127.0.0.1:3128)"
    assert cause_in_words(error) == "connection refused, through the proxy 127.0.0.1:3128"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "DNS name not found"),
        (ConnectionRefusedError(111, "refused"), "connection refused"),
        (ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), "TLS failure"),
        (errors.TransportError("ReadTimeout: no reply bytes for 3 s"), "no answer within 3 s"),
        (errors.TransportError("ConnectTimeout: no connection within 3 s"), "no connection"),
        (
            errors.TransportError("RemoteProtocolError: the server closed the connection"),
            "connection closed",
        ),
    ],
)
def test_causes_are_said_in_words(error: BaseException, words: str) -> None:
    assert cause_in_words(error).startswith(words)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "30", None])
def test_a_bad_open_timeout_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(errors.ConfigError, match="open_timeout"):
        ClientConfig(open_timeout=bad)  # type: ignore[arg-type]


def test_a_silence_is_said_with_the_full_bound_of_an_attempt_when_given_up() -> None:
    """The last attempt before the deadline is shorter; the cause keeps the first's words."""
    contact = FirstContact(URL, "kinesis", open_timeout=30.0)
    contact.attempt_timeout(0.0)
    first = errors.TransportError("ReadTimeout: no reply bytes for 3 s")
    assert contact.failed(first, "ListShards", 1.0, 3.0).warning is not None
    last = errors.TransportError("ReadTimeout: no reply bytes for 1 s")
    unreachable = contact.failed(last, "ListShards", 1.0, 31.0).give_up
    assert unreachable is not None and unreachable.cause == "no answer within 3 s"
