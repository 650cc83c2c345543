"""Credentials (botocore's) and SigV4 signing (written to the published algorithm).

Credential resolution may do blocking I/O (the instance metadata service, an SSO cache, a
credential process), so the client resolves and refreshes credentials in a worker thread;
signing itself is pure computation.

Signing is every call's, so it is done here rather than by botocore's ``SigV4Auth``: measured,
134 µs a GetRecords with botocore (an ``AWSRequest``, its header maps, the signing key derived
anew each time), 12 µs here. The day's signing key (four HMACs of the date, region and
service) is kept until the date or the secret changes, and the timestamp is formatted once a
second. The signature is the same bytes botocore computes for the same request and time: a
test compares them.

Secrets stay out of every ``repr``, log line and error message: a tuple is turned into a
botocore ``Credentials`` object at once (whose ``repr`` shows nothing), errors about the
argument name its type, never its value, and :class:`Signer`'s ``repr`` shows the region only.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import botocore.session
from botocore.credentials import Credentials as BotoCredentials

from .. import errors

__all__ = ["Credentials", "Signer", "resolve_credentials"]

#: ``(access_key, secret_key)`` or ``(access_key, secret_key, token)``, or a botocore
#: ``Credentials`` object, or None for botocore's default chain.
Credentials = tuple[str, str] | tuple[str, str, str] | Any | None


def resolve_credentials(credentials: Credentials) -> Any:
    """Turn the user's ``credentials`` argument into a botocore credentials object.

    Blocking: call it from a worker thread when it may consult the default chain.
    """
    if credentials is None:
        found = botocore.session.get_session().get_credentials()
        if found is None:
            raise errors.ConfigError(
                "credentials: no AWS credentials found in botocore's default chain "
                "(environment, shared files, SSO, container or instance metadata); pass "
                "credentials=(access_key, secret_key[, token])"
            )
        return found
    if isinstance(credentials, tuple):
        if len(credentials) not in (2, 3) or not all(
            isinstance(part, str) and part for part in credentials
        ):
            raise errors.ConfigError(
                "credentials must be (access_key, secret_key) or "
                "(access_key, secret_key, token) of non-empty strings"
            )
        return BotoCredentials(*credentials)
    if hasattr(credentials, "get_frozen_credentials"):
        return credentials
    raise errors.ConfigError(
        "credentials must be a tuple, a botocore Credentials object or None, got a "
        f"{type(credentials).__name__}"  # never its value: it may hold a secret
    )


#: Headers botocore leaves out of the signature (a proxy or the transport may change them).
_UNSIGNED = frozenset({"expect", "user-agent", "x-amzn-trace-id", "authorization", "x-amz-date"})


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def signed_host(url: str) -> str:
    """The ``host`` the signature covers, as the transport sends it: the host name, with the
    port only when it is not the scheme's default (botocore's rule)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    default = 443 if parts.scheme == "https" else 80
    return host if parts.port in (None, default) else f"{host}:{parts.port}"


class Signer:
    """Signs requests with SigV4 for one service (``kinesis``, ``dynamodb``) in one region.

    ``clock`` (seconds since the epoch) is injectable so a test can sign at a known time.
    """

    def __init__(
        self,
        credentials: Any,
        region: str,
        service: str = "kinesis",
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = credentials
        self._region = region
        self._service = service
        self._clock = clock
        self._hosts: dict[str, str] = {}  # url -> signed host; a client signs for one url
        self._second = -1
        self._stamp = ""
        self._key_for: tuple[str, str] = ("", "")  # (secret, date) of the key below
        self._key = b""

    def __repr__(self) -> str:
        return f"Signer(service={self._service!r}, region={self._region!r})"

    def needs_refresh(self) -> bool:
        """Whether reading the credentials now may block on a refresh."""
        refresh_needed = getattr(self._credentials, "refresh_needed", None)
        return bool(refresh_needed()) if callable(refresh_needed) else False

    def refresh(self) -> None:
        """Refresh the credentials if they are about to expire. Blocking: use a thread."""
        self._credentials.get_frozen_credentials()

    def _timestamp(self) -> str:
        second = int(self._clock())
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
        return self._stamp

    def _signing_key(self, secret: str, date: str) -> bytes:
        if self._key_for != (secret, date):
            key = _hmac(("AWS4" + secret).encode("utf-8"), date)
            for part in (self._region, self._service, "aws4_request"):
                key = _hmac(key, part)
            self._key, self._key_for = key, (secret, date)
        return self._key

    def sign(self, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        """The headers to send: ``headers`` plus the date, token and Authorization (the
        transport adds ``Host``, which is signed as :func:`signed_host` gives it)."""
        frozen = self._credentials.get_frozen_credentials()
        stamp = self._timestamp()
        out = {
            name: value
            for name, value in headers.items()
            if name.lower() not in ("authorization", "x-amz-date", "x-amz-security-token")
        }
        out["X-Amz-Date"] = stamp
        if frozen.token:
            out["X-Amz-Security-Token"] = frozen.token
        host = self._hosts.get(url)
        if host is None:
            host = self._hosts[url] = signed_host(url)
        canonical = {
            lowered: " ".join(value.split())
            for name, value in out.items()
            if (lowered := name.lower()) not in _UNSIGNED
        }
        canonical["x-amz-date"] = stamp
        canonical["host"] = host
        names = sorted(canonical)
        signed_names = ";".join(names)
        path = quote(urlsplit(url).path or "/", safe="/~")
        request = "\n".join(
            (
                "POST",
                path,
                "",
                "".join(f"{name}:{canonical[name]}\n" for name in names),
                signed_names,
                hashlib.sha256(body).hexdigest(),
            )
        )
        date = stamp[:8]
        scope = f"{date}/{self._region}/{self._service}/aws4_request"
        to_sign = "\n".join(
            (
                "AWS4-HMAC-SHA256",
                stamp,
                scope,
                hashlib.sha256(request.encode("utf-8")).hexdigest(),
            )
        )
        signature = hmac.new(
            self._signing_key(frozen.secret_key, date), to_sign.encode("utf-8"), hashlib.sha256
        ).hexdigest()
        out["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={frozen.access_key}/{scope}, "
            f"SignedHeaders={signed_names}, Signature={signature}"
        )
        return out
