"""EndpointHealth, without a loop: which failures mean "no answer", and when it speaks."""

from __future__ import annotations

import logging

import pytest

from kinesis_actors import ProducerConfig, errors
from kinesis_actors.producer._health import EndpointHealth

REFUSED = errors.TransportError("ConnectError: [Errno 111] Connection refused")


def health(**options: float | None) -> EndpointHealth:
    return EndpointHealth("orders", "http://127.0.0.1:1", ProducerConfig(**options))  # type: ignore[arg-type]


def test_only_a_transport_error_is_no_answer() -> None:
    watch = health()
    watch.answered(errors.ThrottlingError("slow down"), 1.0)  # a reply, even an error
    watch.answered(errors.CertificateError("bad certificate"), 1.0)  # permanent, not silence
    assert watch.since is None and watch.seconds() == 0.0
    watch.answered(REFUSED, 2.0)
    watch.answered(REFUSED, 3.0)
    assert watch.since == 2.0 and watch.error is REFUSED  # the first silence starts the clock
    assert watch.cause(5.5) == (
        "The endpoint http://127.0.0.1:1 has not answered for 3.5s "
        "(ConnectError: [Errno 111] Connection refused)."
    )


def test_it_warns_after_the_delay_then_every_interval_and_says_when_it_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors.producer")
    watch = health(backpressure_warning_after=1.0, backpressure_warning_interval=10.0)
    assert watch.warn(0.0, 5) is None  # answering: nothing to say, nothing to wait for
    watch.answered(REFUSED, 10.0)
    assert watch.warn(10.5, 5) == 11.0  # not yet: look again when it is due
    assert watch.warn(11.0, 5) == 21.0
    assert watch.warn(15.0, 5) == 21.0  # rate-limited
    [said] = [record.getMessage() for record in caplog.records]
    assert "http://127.0.0.1:1 has not answered for 1.0s" in said
    assert "Connection refused" in said and "5 records" in said and "record_ttl=None" in said
    watch.answered(None, 30.0)
    assert watch.since is None and watch.warn(31.0, 0) is None
    assert "answers again after 20.0s" in caplog.records[-1].getMessage()


def test_with_a_ttl_it_says_when_records_will_fail(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "kinesis_actors.producer")
    watch = health(record_ttl=30.0)
    watch.answered(REFUSED, 0.0)
    watch.warn(5.0, 1)
    assert "RecordExpiredError 30.0s after its put" in caplog.records[-1].getMessage()


def test_answers_again_is_said_only_after_has_not_answered_not_after_every_transport_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A warning that cried wolf: one reset that the next call recovered from
    was followed by "answers again after 0.0s" with no outage said before it, 46-59 lines a
    run. An outage no one was told of has no end to tell."""
    caplog.set_level(logging.DEBUG, "kinesis_actors.producer")
    watch = health(backpressure_warning_after=1.0)
    for moment in (10.0, 20.0, 30.0):
        watch.answered(REFUSED, moment)
        assert watch.warn(moment + 0.5, 3) == moment + 1.0  # not due yet: nothing said
        watch.answered(None, moment + 0.5)
        assert watch.since is None
    assert caplog.records == []
    watch.answered(REFUSED, 40.0)
    watch.warn(41.0, 3)
    watch.answered(None, 42.0)
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 2 and "has not answered for 1.0s" in said[0]
    assert "answers again after 2.0s" in said[1]
