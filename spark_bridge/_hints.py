"""Errors said in the words of the API the user called.

The client's errors speak Python: a certificate that fails verification says to check
``verify``, the argument of ``KinesisClient``. A Spark user sets the option ``verifySsl``, and
a ``partition_writer`` user the keyword ``verify`` (likewise ``endpointUrl`` and
``openTimeout`` for an endpoint never reached); and a missing stream should say which
stream and where, in the first line, since Spark prints the Python traceback under its own
and a user reads the first line. :func:`said_for` turns a client error into one that says so
(the same type, so ``except`` clauses still match); :func:`spoken` applies it at an edge.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kinesis_actors import errors

from ._options import Connection

__all__ = ["said_for", "spoken", "where"]

#: What the client's certificate error says about ``verify`` (kinesis_actors.client._tls).
_CLIENT_HINT = "`verify` (a CA bundle path, or False for a self-signed local server)"
_HINTS = {
    "verifySsl": "the option verifySsl (false for a self-signed local server; a CA bundle "
    "through AWS_CA_BUNDLE)",
    "verify": "the keyword verify= (False for a self-signed local server, or a CA bundle "
    "through AWS_CA_BUNDLE)",
}
#: What the client's EndpointUnreachableError says about the endpoint and its bound
#: (kinesis_actors.client._contact), and the settings of each caller.
_CLIENT_URL = "is the endpoint URL right?"
_UNREACHABLE = {
    "verifySsl": ("is the option endpointUrl right?", "(option openTimeout="),
    "verify": ("is the keyword endpoint_url= right?", "(keyword open_timeout="),
}


def where(connection: Connection) -> str:
    """The endpoint a connection talks to, as a user would recognise it."""
    if connection.endpoint_url is not None:
        return connection.endpoint_url
    return f"the Kinesis endpoint of region {connection.region}"


def said_for(
    error: BaseException, *, stream: str, connection: Connection, hint: str
) -> BaseException | None:
    """``error`` (or the first error of its cause chain) reworded for a user who set
    ``hint`` (``verifySsl`` or ``verify``), or ``None`` when it needs no rewording."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, errors.CertificateError):
            text = current.message
            wanted = _HINTS[hint]
            reworded = (
                text.replace(_CLIENT_HINT, wanted)
                if _CLIENT_HINT in text
                else f"{text}; check {wanted}"
            )
            return errors.CertificateError(
                f"{where(connection)}: {reworded}", operation=current.operation, code=current.code
            )
        if isinstance(current, errors.EndpointUnreachableError):
            url, bound = _UNREACHABLE[hint]
            return errors.EndpointUnreachableError(
                current.message.replace(_CLIENT_URL, url).replace("(open_timeout=", bound),
                endpoint=current.endpoint,
                cause=current.cause,
                operation=current.operation,
            )
        if isinstance(current, errors.ResourceNotFoundError) and current.operation in (
            "DescribeStreamSummary",
            "PutRecords",
            "ListShards",
        ):
            return errors.ResourceNotFoundError(
                f"stream {stream!r} not found at {where(connection)} "
                f"({current.operation}: {current.message})",
                code=current.code,
            )
        current = current.__cause__
    return None


@contextmanager
def spoken(*, stream: str, connection: Connection, hint: str) -> Iterator[None]:
    """Re-raise a certificate, unreachable-endpoint or missing-stream error from the block
    reworded (see :func:`said_for`), chained to the original; anything else as it is."""
    try:
        yield
    except Exception as exc:
        better = said_for(exc, stream=stream, connection=connection, hint=hint)
        if better is None:
            raise
        raise better from exc
