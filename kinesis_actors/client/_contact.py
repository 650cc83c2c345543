"""First contact with an endpoint: until a client has had one reply from it, failing to reach
it is said at once and bounded in time.

A patient retry policy is right for an endpoint that answered and then went away (a blip, a
failover), and wrong for one that was never reached: a wrong URL, a local server that is not
running, a firewall that drops packets. With the retries alone, DescribeStreamSummary spent
about two minutes before saying "ConnectError", and a listening socket that never replies
(30 s per attempt) far longer. So a client keeps one :class:`FirstContact` for its endpoint:

- the first failure to reach it is a WARNING at once, naming the endpoint and the cause;
- until contact, each attempt is bounded by :data:`FIRST_CONTACT_ATTEMPT` (3 s), so a
  silent listener counts as "no answer" within seconds, not after ``read_timeout``;
- until contact, a call gives up ``open_timeout`` after the client's first attempt (or when
  its retries run out, if sooner) with :class:`~kinesis_actors.errors.EndpointUnreachableError`;
- any reply, whatever its status, is contact: from then on nothing here applies.

Sans-IO: every method takes ``now`` (a monotonic time); the client sleeps, logs and raises.
:func:`cause_in_words` is also what the command line says after "cannot reach".
"""

from __future__ import annotations

import errno
import re
import socket
import ssl
from dataclasses import dataclass

from .. import errors

__all__ = [
    "FIRST_CONTACT_ATTEMPT",
    "ContactVerdict",
    "FirstContact",
    "cause_in_words",
    "service_title",
]

#: The longest an attempt may take before the endpoint has answered once: a connection and a
#: first reply from AWS take well under a second, so 3 s is a wide margin, and a silent
#: listener is reported within it rather than after ``read_timeout`` (30 s).
FIRST_CONTACT_ATTEMPT = 3.0

#: How ``_proxy`` and ``_tls`` name the proxy a request went through.
_PROXY = re.compile(r"the proxy ([^\s)]+)")

#: The least an attempt is given, however close the ``open_timeout`` deadline.
_LAST_ATTEMPT = 1.0

_TITLES = {"kinesis": "Kinesis", "dynamodb": "DynamoDB", "sts": "STS"}


def service_title(service: str) -> str:
    """The service's name as people write it (``"dynamodb"`` → ``"DynamoDB"``)."""
    return _TITLES.get(service, service)


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and its causes, bounded against cycles."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not other for other in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def cause_in_words(error: BaseException) -> str:
    """Why a request did not reach its server, in a few words: "connection refused",
    "DNS name not found", "no answer within 3 s", "TLS failure (...)"; else the error's own
    message. A proxy the request went through is named ("..., through the proxy h:p")."""
    message = error.message if isinstance(error, errors.KinesisError) else str(error)
    words = _words(error, message)
    proxy = _PROXY.search(message)
    if proxy is not None and proxy.group(1) not in words:
        if f"the proxy {proxy.group(1)} cannot be reached" in message:
            return f"the proxy {proxy.group(1)} cannot be reached ({words})"
        words += f", through the proxy {proxy.group(1)}"
    return words


def _words(error: BaseException, message: str) -> str:
    chain = _chain(error)
    for exc in chain:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return f"TLS certificate failed verification: {exc.verify_message or exc}"
        if isinstance(exc, socket.gaierror):
            if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
                return "DNS name not found"
            return f"DNS lookup failed: {exc.strerror or exc}"
        if isinstance(exc, ConnectionRefusedError) or (
            isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED
        ):
            return "connection refused"
        if isinstance(exc, ssl.SSLError):
            return f"TLS failure ({getattr(exc, 'reason', None) or exc})"
        if isinstance(exc, ConnectionResetError):
            return "connection reset"
        if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "network unreachable"
    kind, colon, words = message.partition(": ")
    if colon and kind.endswith("Timeout") and not words:
        return "no answer in time"
    if colon and kind == "ReadTimeout":  # "no reply bytes for 3.0 s"
        return words.replace("no reply bytes for", "no answer within")
    if colon and kind in ("ConnectTimeout", "WriteTimeout", "NoAnswer"):
        return words  # "no connection within 5.0 s"
    if "closed the connection" in message:
        return "connection closed without a reply"
    return message


@dataclass(frozen=True, slots=True)
class ContactVerdict:
    """What to do after a failed attempt: ``warning`` to log (once per endpoint), ``give_up``
    to raise instead of retrying, else sleep ``delay`` and try again."""

    warning: str | None = None
    give_up: errors.EndpointUnreachableError | None = None
    delay: float | None = None


class FirstContact:
    """Whether one endpoint has answered yet, and what a failure to reach it means until then.

    Owned by one client, on its event loop; every method takes ``now`` (monotonic seconds).
    """

    __slots__ = (
        "_cause",
        "_started",
        "_warned",
        "endpoint",
        "open_timeout",
        "reached",
        "service",
    )

    def __init__(self, endpoint: str, service: str, open_timeout: float) -> None:
        self.endpoint = endpoint
        self.service = service
        self.open_timeout = open_timeout
        self.reached = False
        self._started: float | None = None
        self._warned = False
        self._cause: str | None = None

    def attempt_timeout(self, now: float) -> float | None:
        """How long an attempt starting ``now`` may wait for a connection and for each of
        the reply's bytes: None once reached (the transport's own timeouts apply), else
        :data:`FIRST_CONTACT_ATTEMPT`, half of ``open_timeout`` (so that a failure is said
        before the call gives up) or the time left before it, whichever is least (but at
        least :data:`_LAST_ATTEMPT`), so that a silent listener makes a call give up at
        ``open_timeout``, not an attempt later. The first attempt starts the
        ``open_timeout`` clock."""
        if self.reached:
            return None
        if self._started is None:
            self._started = now
        bound = min(FIRST_CONTACT_ATTEMPT, self.open_timeout / 2)
        left = self._started + self.open_timeout - now
        return min(bound, max(left, _LAST_ATTEMPT))

    def answered(self) -> None:
        """A reply came (any status): the endpoint is reached, for good."""
        self.reached = True

    def failed(
        self, error: errors.KinesisError, operation: str, delay: float | None, now: float
    ) -> ContactVerdict:
        """An attempt of ``operation`` failed with ``error``; ``delay`` is the retry
        policy's answer (None: it gives up). Before contact, a transport failure (other than
        a certificate's, which the policy never retries) is warned about once, retried at
        most until ``open_timeout`` after the first attempt, and then raised as
        :class:`~kinesis_actors.errors.EndpointUnreachableError`. Otherwise the policy's
        answer stands."""
        if (
            self.reached
            or not isinstance(error, errors.TransportError)
            or isinstance(error, errors.CertificateError | errors.EndpointUnreachableError)
        ):
            return ContactVerdict(delay=delay)
        started = now if self._started is None else self._started
        cause = cause_in_words(error)
        if self._cause is None:
            self._cause = cause
        elif cause.partition(" within ")[0] == self._cause.partition(" within ")[0]:
            cause = self._cause  # the same silence, said with the attempt's full bound
        left = started + self.open_timeout - now
        if delay is None or left <= 0:
            spent = now - started
            why = (
                f"gave up after {spent:.1f} s (open_timeout={self.open_timeout:g})"
                if left <= 0
                else f"gave up after {spent:.1f} s, the retries of {operation} used up"
            )
            message = (
                f"cannot reach {service_title(self.service)} at {self.endpoint} ({cause}); "
                f"{why}; is the server running, and is the endpoint URL right?"
            )
            unreachable = errors.EndpointUnreachableError(
                message, endpoint=self.endpoint, cause=cause, operation=operation
            )
            # The next call (a client kept for a process's life: a Spark worker's) gets an
            # open_timeout and a warning of its own, not one second and silence.
            self._started, self._warned, self._cause = None, False, None
            return ContactVerdict(give_up=unreachable)
        warning = None
        if not self._warned:
            self._warned = True
            warning = (
                f"cannot reach {service_title(self.service)} at {self.endpoint} ({cause}); "
                f"retrying for up to {left:.0f} s (open_timeout)"
            )
        return ContactVerdict(warning=warning, delay=min(delay, left))
