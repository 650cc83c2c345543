"""Credentials and SigV4 signing, both botocore's.

Credential resolution may do blocking I/O (the instance metadata service, an SSO cache, a
credential process), so the client resolves and refreshes credentials in a worker thread;
signing itself is pure computation.

Secrets stay out of every ``repr``, log line and error message: a tuple is turned into a
botocore ``Credentials`` object at once (whose ``repr`` shows nothing), errors about the
argument name its type, never its value, and :class:`Signer`'s ``repr`` shows the region only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
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


class Signer:
    """Signs requests with SigV4 for one service (``kinesis``, ``dynamodb``) in one region."""

    def __init__(self, credentials: Any, region: str, service: str = "kinesis") -> None:
        self._credentials = credentials
        self._region = region
        self._service = service

    def __repr__(self) -> str:
        return f"Signer(service={self._service!r}, region={self._region!r})"

    def needs_refresh(self) -> bool:
        """Whether reading the credentials now may block on a refresh."""
        refresh_needed = getattr(self._credentials, "refresh_needed", None)
        return bool(refresh_needed()) if callable(refresh_needed) else False

    def refresh(self) -> None:
        """Refresh the credentials if they are about to expire. Blocking: use a thread."""
        self._credentials.get_frozen_credentials()

    def sign(self, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        """The headers to send: ``headers`` plus the date, token and Authorization."""
        frozen = self._credentials.get_frozen_credentials()
        request = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
        SigV4Auth(frozen, self._service, self._region).add_auth(request)
        return dict(request.headers.items())
