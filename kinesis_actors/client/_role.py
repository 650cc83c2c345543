"""Credentials of an IAM role assumed with STS, refreshed ahead of their expiry.

What botocore does, and is used for: the AssumeRole call itself
(``AssumeRoleCredentialFetcher``: the request's parameters, an STS client with its timeouts
and retries, the reply read into keys and an expiry time), the base credentials (botocore's
default chain unless given) and ``ReadOnlyCredentials``, the value requests are signed with.

What is written here, and why: *when* the refresh happens. botocore's
``RefreshableCredentials`` refreshes inside ``get_frozen_credentials``, synchronously, in
whichever thread signs; on an event loop that is an STS round trip (with its retries) during
which nothing else on the loop runs. Here, once the credentials are within ``refresh_margin``
of their expiry, the first request that signs starts the refresh in a thread of its own and
signs with the current credentials, as every request does until new ones arrive. A caller
waits only when there are no credentials yet (the first call, which the client makes when it
opens, in a worker thread) or when the current ones are within a third of the margin of
their expiry, which takes STS failing for the rest of the margin. A thread rather than a
task because one :class:`AssumeRole` may serve clients on several event loops (a Spark worker
process shares one per role among its tasks): its refresh belongs to none of them. The
thread is bounded by the STS client's timeouts and retries (``_STS_CONFIG``).

The timing itself is :class:`RefreshTiming`, sans-IO: it is given the time, never reads it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import botocore.session
from botocore.config import Config
from botocore.credentials import AssumeRoleCredentialFetcher, ReadOnlyCredentials
from botocore.exceptions import BotoCoreError, ClientError

from .. import errors
from .._deprecated import renamed
from .._validate import check_positive
from ._signing import Credentials, resolve_credentials

__all__ = ["AssumeRole", "AssumeRoleStats", "RefreshTiming"]

log = logging.getLogger("kinesis_actors.client")

#: IAM's rules: a role ARN, a session name (2-64 of these characters), an external id.
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}")
_SESSION_NAME = re.compile(r"[\w+=,.@-]{2,64}")
_EXTERNAL_ID = re.compile(r"[\w+=,.@:/-]{2,1224}")

#: STS's bounds on DurationSeconds (a role's own maximum may be lower: STS then refuses).
_MIN_DURATION, _MAX_DURATION = 900, 43_200

#: The STS client: bounded connect and read, botocore's standard retries (throttling, 5xx,
#: connection errors), three attempts in all.
_STS_CONFIG = Config(
    connect_timeout=5,
    read_timeout=10,
    retries={"mode": "standard", "max_attempts": 3},
    user_agent_extra="kinesis-actors",
)

Decision = Literal["use", "ahead", "wait"]


class RefreshTiming:
    """When credentials that expire are refreshed: sans-IO, every method takes ``now``.

    ``use`` the credentials in hand while more than ``margin`` seconds remain; ``ahead``
    (refresh in the background, keep using them) within ``margin``; ``wait`` for new ones
    when there are none or less than ``wait_margin`` remains. After a failed background
    refresh the next one waits ``backoff`` (1 s, doubling up to 60 s), so that STS failing
    costs one attempt per backoff, not one per request.
    """

    __slots__ = ("_failures", "_not_before", "margin", "wait_margin")

    def __init__(self, margin: float, wait_margin: float | None = None) -> None:
        self.margin = margin
        self.wait_margin = margin / 3 if wait_margin is None else wait_margin
        self._failures = 0
        self._not_before = 0.0

    def decide(self, expiry: float | None, now: float) -> Decision:
        """What a caller who needs credentials at ``now`` does with those expiring at
        ``expiry`` (epoch seconds; None when there are none)."""
        if expiry is None or expiry - now <= self.wait_margin:
            return "wait"
        if expiry - now <= self.margin and now >= self._not_before:
            return "ahead"
        return "use"

    def failed(self, now: float) -> float:
        """A background refresh failed at ``now``: the seconds until the next may start."""
        backoff = min(60.0, 2.0**self._failures)
        self._failures = min(self._failures + 1, 16)
        self._not_before = now + backoff
        return backoff

    def succeeded(self) -> None:
        self._failures = 0
        self._not_before = 0.0


@dataclass(frozen=True, slots=True)
class AssumeRoleStats:
    """A snapshot of an :class:`AssumeRole`'s work (``role.statistics()``).

    ``assumed`` counts AssumeRole calls that gave credentials; ``refreshed_ahead`` those made
    in the background while the current credentials were still in use; ``waited`` the times
    a caller had to wait for credentials (the first fetch included); ``failures`` the calls
    that failed. ``expires_at`` is when the credentials in hand expire (epoch seconds), None
    before the first.
    """

    assumed: int = 0
    refreshed_ahead: int = 0
    waited: int = 0
    failures: int = 0
    expires_at: float | None = None


class _NoCache:
    """The fetcher's cache, empty: every fetch asks STS (the timing is decided here)."""

    def __contains__(self, key: object) -> bool:
        return False

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __setitem__(self, key: str, value: Any) -> None:
        pass


class AssumeRole:
    """Credentials of an IAM role assumed with STS: pass it as ``credentials=`` to
    :class:`~kinesis_actors.KinesisClient`, :class:`~kinesis_actors.DynamoDBClient` or
    :class:`~kinesis_actors.sync.SyncProducer` (a lease group's DynamoDB client uses its
    consumer's).

    - ``role_arn``: the role to assume, in this account or another.
    - ``session_name``: the role session's name (CloudTrail shows it); ``external_id``: the
      external id the role's trust policy asks for, if any.
    - ``sts_endpoint_url`` / ``sts_region``: where STS is called; by default botocore's
      endpoint for ``sts_region``, itself botocore's configured region, else ``us-east-1``.
    - ``duration``: the session's length in seconds (STS allows 900 to 43,200; the role's
      maximum may be lower, and STS then refuses).
    - ``credentials``: what the role is assumed with: botocore's default chain (None),
      ``(access_key, secret_key[, token])``, a botocore credentials object, or another
      :class:`AssumeRole` (role chaining).
    - ``refresh_margin``: the credentials are renewed, in a background thread, once they
      have less than this many seconds to live (15 minutes by default, as botocore's
      advisory refresh); a caller waits for new ones only in the last third of it.

    Nothing is called at construction (a bad argument raises
    :class:`~kinesis_actors.errors.ConfigError` naming it); the role is first assumed by the
    first client that opens with it, in a worker thread. One object shares one role session:
    clients given the same object make one AssumeRole call between them per refresh, even
    on different event loops or threads. A refusal from STS raises
    :class:`~kinesis_actors.errors.AssumeRoleError` naming the role, at once. The external
    id and the keys appear in no ``repr``, log line or error.
    """

    def __init__(
        self,
        role_arn: str,
        *,
        session_name: str = "kinesis-actors",
        external_id: str | None = None,
        sts_endpoint_url: str | None = None,
        sts_region: str | None = None,
        duration: int = 3600,
        credentials: Credentials = None,
        refresh_margin: float = 900.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(role_arn, str) or not _ROLE_ARN.fullmatch(role_arn):
            raise errors.ConfigError(
                "AssumeRole.role_arn must be an IAM role ARN "
                f"(arn:aws:iam::123456789012:role/name), got {role_arn!r}"
            )
        if not isinstance(session_name, str) or not _SESSION_NAME.fullmatch(session_name):
            raise errors.ConfigError(
                "AssumeRole.session_name must be 2 to 64 letters, digits or +=,.@_- "
                f"characters, got {session_name!r}"
            )
        if external_id is not None and (
            not isinstance(external_id, str) or not _EXTERNAL_ID.fullmatch(external_id)
        ):
            # Not its value: an external id is often treated as a shared secret.
            raise errors.ConfigError(
                "AssumeRole.external_id must be 2 to 1,224 letters, digits or +=,.@:/_- characters"
            )
        if sts_endpoint_url is not None:
            parts = urlsplit(sts_endpoint_url) if isinstance(sts_endpoint_url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                raise errors.ConfigError(
                    "AssumeRole.sts_endpoint_url must be an http:// or https:// URL, "
                    f"got {sts_endpoint_url!r}"
                )
        if sts_region is not None and (not isinstance(sts_region, str) or not sts_region):
            raise errors.ConfigError(
                f"AssumeRole.sts_region must be a non-empty string, got {sts_region!r}"
            )
        check_positive("AssumeRole.duration", duration, integer=True)
        if not _MIN_DURATION <= duration <= _MAX_DURATION:
            raise errors.ConfigError(
                f"AssumeRole.duration must be {_MIN_DURATION} to {_MAX_DURATION} seconds "
                f"(STS's bounds), got {duration!r}"
            )
        check_positive("AssumeRole.refresh_margin", refresh_margin)
        if refresh_margin >= duration:
            raise errors.ConfigError(
                f"AssumeRole.refresh_margin ({refresh_margin!r} s) must be less than "
                f"AssumeRole.duration ({duration!r} s): the credentials would be renewed "
                "on every request"
            )
        if not callable(clock):
            raise errors.ConfigError("AssumeRole.clock must be a callable returning epoch seconds")
        self.role_arn = role_arn
        self.session_name = session_name
        self.sts_endpoint_url = sts_endpoint_url
        self.sts_region = sts_region
        self.duration = duration
        self.refresh_margin = float(refresh_margin)
        self._external_id = external_id
        # A tuple becomes a botocore Credentials object now: checked, and out of reprs.
        self._base = None if credentials is None else resolve_credentials(credentials)
        self._clock = clock
        # Guards everything below; never held across an STS call.
        self._lock = threading.Lock()
        # Held by whoever is calling STS: one call at a time, the others wait or go on.
        self._fetching = threading.Lock()
        self._timing = RefreshTiming(self.refresh_margin)
        self._frozen: ReadOnlyCredentials | None = None
        self._expiry: float | None = None
        self._ahead_running = False
        self._fetcher: AssumeRoleCredentialFetcher | None = None
        self._counts = {"assumed": 0, "refreshed_ahead": 0, "waited": 0, "failures": 0}

    def __repr__(self) -> str:
        where = f", sts_endpoint_url={self.sts_endpoint_url!r}" if self.sts_endpoint_url else ""
        return (
            f"AssumeRole(role_arn={self.role_arn!r}, session_name={self.session_name!r}"
            f"{where}, duration={self.duration})"
        )

    def statistics(self) -> AssumeRoleStats:
        """The role's work now, as a frozen :class:`AssumeRoleStats` (from any thread)."""
        with self._lock:
            return AssumeRoleStats(**self._counts, expires_at=self._expiry)

    @property
    def stats(self) -> AssumeRoleStats:
        """Deprecated: :meth:`statistics`, the same snapshot."""
        renamed("AssumeRole.stats", "AssumeRole.statistics()")
        return self.statistics()

    # botocore's credentials protocol, as the client's signer uses it -----------------------

    def refresh_needed(self) -> bool:
        """Whether :meth:`get_frozen_credentials` would block now (on an STS call): the
        client then calls it from a worker thread."""
        with self._lock:
            return self._timing.decide(self._expiry, self._clock()) == "wait"

    def get_frozen_credentials(self) -> ReadOnlyCredentials:
        """The credentials to sign with now. Starts a background refresh when they are
        within ``refresh_margin`` of expiry; blocks (on STS) only when :meth:`refresh_needed`.
        """
        start = False
        with self._lock:
            decision = self._timing.decide(self._expiry, self._clock())
            frozen = self._frozen
            if decision == "ahead" and not self._ahead_running:
                self._ahead_running = start = True
        if decision == "wait" or frozen is None:
            return self._wait_for_new()
        if start:
            name = f"kinesis-actors assume {self.role_arn}"
            threading.Thread(target=self._refresh_ahead, name=name, daemon=True).start()
        return frozen

    # The refreshes ----------------------------------------------------------------------

    def _wait_for_new(self) -> ReadOnlyCredentials:
        with self._fetching:
            with self._lock:  # another thread may have fetched them while this one waited
                if self._frozen is not None and (
                    self._timing.decide(self._expiry, self._clock()) != "wait"
                ):
                    return self._frozen
                self._counts["waited"] += 1
            return self._fetch()

    def _refresh_ahead(self) -> None:
        try:
            with self._fetching:
                with self._lock:
                    if self._timing.decide(self._expiry, self._clock()) == "use":
                        return  # a waiting caller fetched new ones meanwhile
                self._fetch()
                with self._lock:
                    self._counts["refreshed_ahead"] += 1
        except Exception as exc:
            with self._lock:
                now = self._clock()
                backoff = self._timing.failed(now)
                left = (self._expiry or now) - now
            log.warning(
                "refreshing the credentials of role %s ahead of expiry failed (%s); the "
                "current ones stay in use (%.0fs left), next attempt in %.0fs",
                self.role_arn,
                exc,
                left,
                backoff,
            )
        finally:
            with self._lock:
                self._ahead_running = False

    def _fetch(self) -> ReadOnlyCredentials:
        """One AssumeRole call (with botocore's retries), its result made current. Blocking;
        the caller holds ``_fetching``."""
        try:
            if self._fetcher is None:
                self._fetcher = self._new_fetcher()
            fetched = self._fetcher.fetch_credentials()
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code") or "") or None
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            message = error.get("Message") or str(exc)
            raise self._failed(
                errors.AssumeRoleError(
                    f"cannot assume role {self.role_arn}: {message}",
                    role_arn=self.role_arn,
                    code=code,
                    status_code=status if isinstance(status, int) else None,
                )
            ) from exc
        except BotoCoreError as exc:  # unreachable endpoint, timeout, a reply not understood
            raise self._failed(
                errors.AssumeRoleError(
                    f"cannot assume role {self.role_arn}: {exc}", role_arn=self.role_arn
                )
            ) from exc
        except errors.ConfigError as exc:  # no base credentials in botocore's chain
            raise self._failed(
                errors.ConfigError(f"{exc.message}, to assume role {self.role_arn} with")
            ) from None
        frozen = ReadOnlyCredentials(fetched["access_key"], fetched["secret_key"], fetched["token"])
        expiry = datetime.fromisoformat(str(fetched["expiry_time"])).timestamp()
        with self._lock:
            self._frozen, self._expiry = frozen, expiry
            self._timing.succeeded()
            self._counts["assumed"] += 1
        log.debug("assumed role %s; the credentials expire at %.0f", self.role_arn, expiry)
        return frozen

    def _failed(self, error: errors.KinesisError) -> errors.KinesisError:
        with self._lock:
            self._counts["failures"] += 1
        return error

    def _new_fetcher(self) -> AssumeRoleCredentialFetcher:
        """botocore's fetcher, built on first use: reading botocore's configuration and the
        default chain may block (files, instance metadata)."""
        session = botocore.session.get_session()
        base = self._base if self._base is not None else resolve_credentials(None)
        region = self.sts_region or session.get_config_variable("region") or "us-east-1"
        endpoint = self.sts_endpoint_url

        def create_client(service: str, **kwargs: Any) -> Any:
            return session.create_client(
                service, region_name=region, endpoint_url=endpoint, config=_STS_CONFIG, **kwargs
            )

        extra: dict[str, Any] = {
            "RoleSessionName": self.session_name,
            "DurationSeconds": self.duration,
        }
        if self._external_id is not None:
            extra["ExternalId"] = self._external_id
        return AssumeRoleCredentialFetcher(
            create_client, base, self.role_arn, extra_args=extra, cache=_NoCache()
        )
