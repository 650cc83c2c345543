"""Typed errors.

Every error the library raises on purpose derives from :class:`KinesisError`. Service errors
are mapped from the service's ``__type`` (for example ``ResourceNotFoundException``) so that
callers can catch what they can act on, and keep the service's code and message for the rest.
Kinesis and DynamoDB share the codes they have in common (``ResourceNotFoundException``,
``ResourceInUseException``, ``ValidationException``, the throttling codes), so one ``except``
serves both clients.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "AssumeRoleError",
    "CertificateError",
    "ConditionalCheckFailedError",
    "ConfigError",
    "ConsumerClosedError",
    "EndpointUnreachableError",
    "ExpiredIteratorError",
    "KMSError",
    "KinesisError",
    "LeaseLostError",
    "LeaseTableError",
    "MalformedReplyError",
    "PoisonRecordError",
    "PositionsMismatchError",
    "ProducerClosedError",
    "ProducerFailedError",
    "RecordExpiredError",
    "RecordTooLargeError",
    "ResourceInUseError",
    "ResourceNotFoundError",
    "ServiceError",
    "ShardUnreadableError",
    "ThrottlingError",
    "TransportError",
    "ValidationError",
    "WorkerIdConflictError",
    "error_from_code",
]


class KinesisError(Exception):
    """Base class of every error this library raises on purpose.

    ``code`` is the service's error code (``"ResourceNotFoundException"``) when the error came
    from the service, ``operation`` the Kinesis (or DynamoDB) operation that failed, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        operation: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.operation = operation
        self.status_code = status_code

    def __str__(self) -> str:
        where = f"{self.operation}: " if self.operation else ""
        code = f" ({self.code})" if self.code else ""
        return f"{where}{self.message}{code}"


class ConfigError(KinesisError, ValueError):
    """Bad configuration, raised before any network call; the message names the option."""


class ValidationError(KinesisError, ValueError):
    """Bad input to an operation: an invalid argument, checked locally or by the service."""


class RecordTooLargeError(ValidationError):
    """A record's data is larger than the stream accepts."""


class ResourceNotFoundError(KinesisError):
    """The stream, shard or consumer (or DynamoDB table) does not exist, or is not visible to
    these credentials; DynamoDB also says so of a table that is still being created."""


class ResourceInUseError(KinesisError):
    """The resource is busy: being created or deleted, or a subscription already exists; or
    CreateTable of a table that exists."""


class ThrottlingError(KinesisError):
    """The service refused for rate: ProvisionedThroughputExceeded, LimitExceeded,
    Throttling, or DynamoDB's RequestLimitExceeded. Retried."""


class ConditionalCheckFailedError(KinesisError):
    """A DynamoDB write's condition did not hold: someone else changed the item first.

    An answer, not a failure: never retried (another attempt meets the same item). ``item``
    is the item as it stood, in the low-level shapes (``{"leaseCounter": {"N": "7"}}``), when
    the request asked for it with ``ReturnValuesOnConditionCheckFailure="ALL_OLD"`` and the
    service sent it; None otherwise (the local server never sends it).

    ``retried`` is True when the condition failed on a retry of the request: an earlier
    attempt may then have been applied with only its reply lost (a reset connection, a
    timeout), so the item may hold the caller's own write. Read the item to know.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        operation: str | None = None,
        status_code: int | None = None,
        item: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message, code=code, operation=operation, status_code=status_code)
        self.item = item
        self.retried = False


class LeaseTableError(KinesisError):
    """The lease table cannot be used as it is, and nothing was written to it.

    Raised for a table whose key schema is not the KCL's (``leaseKey``, a string hash key), and
    for items that belong to another stream or to the other lease-key form (a multi-stream
    table read by a single-stream worker, or the reverse); and while running, for a table
    deleted (ResourceNotFound) or re-created with another key schema (ValidationException on
    a lease's key). ``table`` names the table and ``operation`` the request that failed; the
    message says what was found and what was expected.
    """

    def __init__(
        self,
        message: str,
        *,
        table: str,
        operation: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, operation=operation, code=code)
        self.table = table


class LeaseLostError(KinesisError):
    """This worker no longer holds the lease: its conditional write found another owner or
    counter. The shard's reader must stop at once; what it processed after the last
    checkpoint will be delivered again to the lease's next owner (at-least-once)."""

    def __init__(self, message: str, *, stream: str, shard_id: str) -> None:
        super().__init__(message)
        self.stream = stream
        self.shard_id = shard_id


class WorkerIdConflictError(KinesisError):
    """Another live process uses this worker's id.

    Detected only on evidence: a lease owned by this id, but not held by this process, keeps
    being renewed (its counter changed twice). A write whose condition failed is not
    evidence (its reply may have been lost; the lease is read back and settled). Two live
    processes with one id would both believe they hold the same shards: every live worker
    needs its own id (a restarted worker may reuse its id).
    """

    def __init__(self, message: str, *, worker_id: str, lease_key: str) -> None:
        super().__init__(message)
        self.worker_id = worker_id
        self.lease_key = lease_key


class ExpiredIteratorError(KinesisError):
    """A shard iterator (or a pagination token) has expired; get a new one from the position."""


class AccessDeniedError(KinesisError):
    """The credentials are not allowed to do this."""


class AssumeRoleError(KinesisError):
    """STS did not give credentials for the role to assume (``role_arn`` names it; ``code`` is
    STS's error code, such as ``AccessDenied``, when STS answered).

    Never retried by the client: a refusal (AccessDenied, a wrong external id, a duration
    over the role's maximum) meets the same answer again, and botocore's STS client has
    already retried what was transient (throttling, 5xx, a dropped connection). Raised where
    credentials are needed: opening a client, or a call when the credentials in hand are
    about to expire.
    """

    def __init__(
        self,
        message: str,
        *,
        role_arn: str,
        code: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, code=code, operation="AssumeRole", status_code=status_code)
        self.role_arn = role_arn


class KMSError(KinesisError):
    """A KMS failure on an encrypted stream (disabled key, missing permission, throttling)."""


class ServiceError(KinesisError):
    """The service failed on its side (HTTP 5xx, InternalFailure); usually worth a retry."""


class MalformedReplyError(ServiceError):
    """A success reply (2xx) that the library cannot believe: a body that is not JSON, or a
    field it uses missing or of the wrong type, or a PutRecords reply whose entries do not
    match the request. Retried like a 5xx; ``operation`` names the call.

    When the reply is well-formed but some of its *records* are not (GetRecords, a
    SubscribeToShard event), ``bad_records`` lists them as ``(index, sequence_number or None,
    what is wrong)`` and ``reply`` is the decoded reply without them, so that a consumer can
    name the poison record, or skip it and keep the rest.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        operation: str | None = None,
        status_code: int | None = None,
        bad_records: tuple[tuple[int, str | None, str], ...] = (),
        reply: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message, code=code, operation=operation, status_code=status_code)
        self.bad_records = bad_records
        self.reply = reply


class TransportError(KinesisError):
    """The request did not complete: connection refused or reset, or a timeout."""


class CertificateError(TransportError):
    """The server's TLS certificate failed verification. Never retried: another attempt
    meets the same certificate. Check ``verify`` / ``AWS_CA_BUNDLE`` and the endpoint."""


class EndpointUnreachableError(TransportError):
    """The client never reached its endpoint: every attempt since it opened failed to connect
    or got no answer, for ``ClientConfig.open_timeout`` seconds (or for the operation's
    retries, when those ran out first). ``endpoint`` is the URL, ``cause`` the reason in
    words ("connection refused", "no answer within 3 s", "DNS name not found", a TLS
    failure). Once a client has had one reply from its endpoint, a later outage is retried
    as before and raises plain :class:`TransportError`."""

    def __init__(self, message: str, *, endpoint: str, cause: str, operation: str | None) -> None:
        super().__init__(message, operation=operation)
        self.endpoint = endpoint
        self.cause = cause


class ShardUnreadableError(KinesisError):
    """An open shard cannot be read from where the consumer stands.

    Raised instead of quietly treating the shard as finished: ``stream``, ``shard_id`` and
    ``position`` (a description of where reading was to start) say which records are at
    stake. The shard's position is left as it was, so nothing is skipped on a resume.
    """

    def __init__(
        self,
        message: str,
        *,
        stream: str,
        shard_id: str,
        position: str | None = None,
        code: str | None = None,
        operation: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, code=code, operation=operation, status_code=status_code)
        self.stream = stream
        self.shard_id = shard_id
        self.position = position


class PositionsMismatchError(KinesisError):
    """A positions document (or a Spark offset) belongs to another stream, or to another
    incarnation of a stream of the same name (deleted and created again). Resuming from it
    would skip or repeat records, so the consumer refuses; start fresh by leaving the
    document out (or dropping the stream's entries from it)."""


class PoisonRecordError(KinesisError):
    """A record in a reply from the server is malformed (bad base64, a missing or mistyped
    field). ``stream``, ``shard_id`` and ``sequence_number`` (None when that is what is
    broken) name it; ``index`` is its place in the reply."""

    def __init__(
        self,
        message: str,
        *,
        stream: str,
        shard_id: str,
        sequence_number: str | None,
        index: int | None = None,
        operation: str | None = None,
    ) -> None:
        super().__init__(message, operation=operation)
        self.stream = stream
        self.shard_id = shard_id
        self.sequence_number = sequence_number
        self.index = index


class ConsumerClosedError(KinesisError):
    """The consumer is closed: it yields no more batches and takes no commits."""


class RecordExpiredError(KinesisError):
    """A produced record was not acknowledged within the producer's ``record_ttl``.

    The record was given up on, never silently: its handle raises this error, the producer
    counts it in ``records_failed``, and ``__cause__`` is the last failure it saw, if any.
    """


class ProducerFailedError(KinesisError):
    """The producer gave up on a record with ``fail_on_error`` set, so it refuses new work.

    Raised by ``put`` and ``flush`` after the failure, like Flink's asynchronous error check;
    ``__cause__`` is the first record failure.
    """


class ProducerClosedError(KinesisError):
    """The producer is closed (or closing) and accepts no records; or it closed before a
    record could be sent, in which case that record's handle raises this."""


_BY_CODE: dict[str, type[KinesisError]] = {
    "ResourceNotFoundException": ResourceNotFoundError,
    "ResourceInUseException": ResourceInUseError,
    "ProvisionedThroughputExceededException": ThrottlingError,
    "LimitExceededException": ThrottlingError,
    "ThrottlingException": ThrottlingError,
    "RequestLimitExceeded": ThrottlingError,  # DynamoDB's account-level rate limit
    "ConditionalCheckFailedException": ConditionalCheckFailedError,
    "ExpiredIteratorException": ExpiredIteratorError,
    "ExpiredNextTokenException": ExpiredIteratorError,
    "InvalidArgumentException": ValidationError,
    "ValidationException": ValidationError,
    "SerializationException": ValidationError,
    "AccessDeniedException": AccessDeniedError,
    "UnrecognizedClientException": AccessDeniedError,
    "IncompleteSignature": AccessDeniedError,
    "InvalidSignatureException": AccessDeniedError,
    "KMSDisabledException": KMSError,
    "KMSInvalidStateException": KMSError,
    "KMSAccessDeniedException": KMSError,
    "KMSNotFoundException": KMSError,
    "KMSOptInRequired": KMSError,
    "KMSThrottlingException": ThrottlingError,
    "InternalFailure": ServiceError,  # PutRecords' per-record code
    "InternalFailureException": ServiceError,
    "InternalServerError": ServiceError,
    "ServiceUnavailable": ServiceError,
    "ServiceUnavailableException": ServiceError,
}


def error_from_code(
    code: str,
    message: str,
    *,
    operation: str | None = None,
    status_code: int | None = None,
) -> KinesisError:
    """Build the typed error for a service error code.

    Codes may arrive qualified (``com.amazonaws.kinesis.v20131202#ResourceNotFoundException``)
    or with a suffix after a colon; both are reduced to the bare code first.
    """
    bare = code.rsplit("#", 1)[-1].split(":", 1)[0]
    cls = _BY_CODE.get(bare)
    if cls is None:
        cls = ServiceError if status_code is not None and status_code >= 500 else KinesisError
    return cls(message or bare, code=bare, operation=operation, status_code=status_code)
