"""TLS contexts, and transport failures as typed errors: a certificate that fails
verification is permanent (lesson 34), everything else is worth another attempt."""

from __future__ import annotations

import ssl

import certifi

from .. import errors

__all__ = ["certificate_failure", "ssl_contexts", "transport_error"]


def ssl_contexts(verify: bool | str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """Contexts for the httpx pool and for subscriptions (ALPN ``h2`` only).

    Two, because httpx sets its own ALPN list on its context at every connect.
    """
    pool, subscriptions = _ssl_context(verify), _ssl_context(verify)
    subscriptions.set_alpn_protocols(["h2"])
    return pool, subscriptions


def _ssl_context(verify: bool | str) -> ssl.SSLContext:
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return ssl.create_default_context(cafile=certifi.where())


def certificate_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind ``exc``, if that is what it is.

    httpx wraps it twice (its ConnectError, from httpcore's, from the ssl error); anyio's
    ``connect_tcp`` raises it bare. The chain is walked, bounded against cycles.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def transport_error(exc: BaseException, operation: str) -> errors.TransportError:
    """The typed error for a failed request: :class:`~kinesis_actors.errors.CertificateError`
    (never retried) when the server's certificate failed verification, else a retryable
    :class:`~kinesis_actors.errors.TransportError`. The message keeps the ssl module's words
    (``CERTIFICATE_VERIFY_FAILED``), which the CLI looks for to suggest ``--no-verify``."""
    failure = certificate_failure(exc)
    if failure is not None:
        return errors.CertificateError(
            f"the server's TLS certificate failed verification: {failure}; check the "
            "endpoint, and `verify` (a CA bundle path, or False for a self-signed local "
            "server)",
            operation=operation,
        )
    return errors.TransportError(f"{type(exc).__name__}: {exc}", operation=operation)
