"""TLS contexts, and transport failures as typed errors: a certificate that fails
verification is permanent, everything else is worth another attempt.

The CA bundle follows botocore's configuration, as boto3, the KCL and the KPL do for users
behind TLS inspection: ``verify=True`` (the default) means "verify, with the bundle botocore is
configured with" (``AWS_CA_BUNDLE``, the config file's ``ca_bundle``, then
``REQUESTS_CA_BUNDLE`` as botocore's endpoint does), or certifi's when none is; an explicit
path or ``False`` wins over all of them.
"""

from __future__ import annotations

import os
import ssl

import botocore.session
import certifi

from .. import errors

__all__ = ["certificate_failure", "resolve_verify", "ssl_contexts", "transport_error"]


def resolve_verify(
    verify: bool | str, session: botocore.session.Session | None = None
) -> bool | str:
    """``verify`` with botocore's CA bundle put in for True; blocking (reads config files).

    An empty or blank configured bundle is refused, as botocore refuses it.
    """
    if verify is not True:
        return verify
    if session is None:
        session = botocore.session.get_session()
    configured = session.get_config_variable("ca_bundle")
    if configured is None:
        configured = os.environ.get("REQUESTS_CA_BUNDLE")  # botocore's endpoint reads it so
    if configured is None:
        return True
    if not isinstance(configured, str) or not configured.strip():
        raise errors.ConfigError(
            "the CA bundle configured for botocore (AWS_CA_BUNDLE, ca_bundle in the AWS "
            "config file, or REQUESTS_CA_BUNDLE) is empty; give the path of a PEM file"
        )
    return configured


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
        try:
            return ssl.create_default_context(cafile=verify)
        except (OSError, ssl.SSLError) as exc:
            raise errors.ConfigError(
                f"the CA bundle {verify!r} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
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


def transport_error(
    exc: BaseException, operation: str, proxy: object = None
) -> errors.TransportError:
    """The typed error for a failed request: :class:`~kinesis_actors.errors.CertificateError`
    (never retried) when the server's certificate failed verification, else a retryable
    :class:`~kinesis_actors.errors.TransportError`. The message keeps the ssl module's words
    (``CERTIFICATE_VERIFY_FAILED``), which the CLI looks for to suggest ``--no-verify``.
    With a ``proxy`` (its ``str()`` is ``host:port``), the message says the request went
    through it: a proxy that is down is then named, not only "connection refused"."""
    if isinstance(exc, errors.TransportError):
        return exc  # already typed (the tunnel's own errors name the proxy)
    through = f" (through the proxy {proxy})" if proxy is not None else ""
    failure = certificate_failure(exc)
    if failure is not None:
        return errors.CertificateError(
            f"the server's TLS certificate failed verification: {failure}; check the "
            "endpoint, and `verify` (a CA bundle path, or False for a self-signed local "
            f"server){through}",
            operation=operation,
        )
    return errors.TransportError(f"{type(exc).__name__}: {exc}{through}", operation=operation)
