"""SigV4 signing: our signer gives the bytes botocore's gives, for the same request and time."""

from __future__ import annotations

import datetime

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from kinesis_actors.client._protocol import ProtocolCodec
from kinesis_actors.client._signing import Signer, signed_host

WHEN = datetime.datetime(2026, 11, 27, 23, 59, 59, tzinfo=datetime.UTC)


def botocore_headers(
    monkeypatch: pytest.MonkeyPatch,
    credentials: Credentials,
    url: str,
    headers: dict[str, str],
    body: bytes,
    when: datetime.datetime,
) -> dict[str, str]:
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: when.replace(tzinfo=None))
    request = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
    SigV4Auth(credentials, "kinesis", "eu-west-1").add_auth(request)
    return dict(request.headers.items())


@pytest.mark.parametrize(
    "url",
    [
        "https://kinesis.eu-west-1.amazonaws.com/",
        "http://127.0.0.1:4567/",
        "https://localhost:443/",
        "http://[::1]:8080/",
    ],
)
@pytest.mark.parametrize("token", [None, "session-token"])
def test_the_signature_is_botocores_for_the_same_request_and_time(
    monkeypatch: pytest.MonkeyPatch, url: str, token: str | None
) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", token)
    request = ProtocolCodec(service="kinesis").encode(
        "GetRecords", {"ShardIterator": "AAAA  spaced  value", "Limit": 10}
    )
    signer = Signer(credentials, "eu-west-1", "kinesis", clock=WHEN.timestamp)
    ours = signer.sign(url, request.headers, request.body)
    theirs = botocore_headers(
        monkeypatch, credentials, url, dict(request.headers), request.body, WHEN
    )
    assert ours == theirs


def test_a_new_day_signs_with_that_days_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The day's signing key is kept, so the day after must not reuse it."""
    credentials = Credentials("AKIDEXAMPLE", "secret")
    now = [WHEN.timestamp()]
    signer = Signer(credentials, "eu-west-1", "kinesis", clock=lambda: now[0])
    url, headers = "https://kinesis.eu-west-1.amazonaws.com/", {"X-Amz-Target": "K.Op"}
    first = signer.sign(url, headers, b"{}")
    now[0] += 1  # one second later: the next day
    second = signer.sign(url, headers, b"{}")
    assert first["X-Amz-Date"] == "20261127T235959Z"
    assert second["X-Amz-Date"] == "20261128T000000Z"
    tomorrow = WHEN + datetime.timedelta(seconds=1)
    assert second == botocore_headers(monkeypatch, credentials, url, headers, b"{}", tomorrow)


def test_a_rotated_secret_is_signed_with_at_once() -> None:
    """Refreshed credentials change the secret within a day: the kept key must follow."""

    class Rotating:
        def __init__(self) -> None:
            self.current = Credentials("AKID", "old")

        def get_frozen_credentials(self) -> object:
            return self.current.get_frozen_credentials()

    credentials = Rotating()
    signer = Signer(credentials, "eu-west-1", "kinesis", clock=WHEN.timestamp)
    before = signer.sign("https://k/", {}, b"{}")["Authorization"]
    credentials.current = Credentials("AKID", "new")
    after = signer.sign("https://k/", {}, b"{}")["Authorization"]
    fresh = Signer(credentials.current, "eu-west-1", "kinesis", clock=WHEN.timestamp)
    assert after != before
    assert after == fresh.sign("https://k/", {}, b"{}")["Authorization"]


def test_the_signed_host_drops_only_the_schemes_default_port() -> None:
    assert signed_host("https://Kinesis.example.com:443/") == "kinesis.example.com"
    assert signed_host("http://h:80/") == "h"
    assert signed_host("http://h:443/") == "h:443"
    assert signed_host("http://[::1]:8080/") == "[::1]:8080"
