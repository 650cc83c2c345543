"""The AWS JSON protocol, sans-IO: operations to request bodies, responses to results.

One codec per service: Kinesis (JSON 1.1) and DynamoDB (JSON 1.0; the lease table).
Serialization, validation and parsing are botocore's, driven by the service model botocore
ships, so every operation of the service works with boto3's low-level Python shapes (bytes for
blobs, datetimes for timestamps, DynamoDB attribute values as ``{"N": "1"}``). This module adds
what the client needs around them: typed errors instead of error dicts, and UTC timestamps.

Every 2xx reply is checked before it is believed (``_replies`` and
``_dynamodb_replies``): a body that is empty, not JSON or not an object, or lacks a field the
library reads, or whose ``x-amz-crc32`` header (DynamoDB sends one) does not match it, raises
:class:`~kinesis_actors.errors.MalformedReplyError`, never ``{}`` or a ``KeyError``.

Hand-written paths, for the hot ones:

- PutRecords (the producer's). Measured with 500 records of 100 bytes a call, botocore's
  validation plus serialization costs 12.5 µs a record and its parser 4.7 µs;
  :meth:`ProtocolCodec.encode_put_records` (for records the producer already validated) costs
  2.5 µs and ``json.loads`` 0.7 µs, giving the parser's shapes since the operation's output
  holds only strings and integers (unlike the parser it keeps members the model does not
  know; the producer reads the ones it needs by name).
- GetRecords and SubscribeToShard's events (the consumer's), decoded by ``_records``, which
  also checks every record.
"""

from __future__ import annotations

import functools
import json
import zlib
from binascii import b2a_base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import botocore.session
from botocore import parsers, serialize, validate

from .. import errors
from ._dynamodb_replies import DYNAMODB_REPLIES
from ._records import (
    collector_held,
    decode_get_records,
    decode_subscribe_event,
    utc_timestamp,
)
from ._replies import REPLIES, Struct, check_put_records, find_problem, load_reply, malformed
from ._streams import stream_params

__all__ = ["JSON_ONLY_OUTPUTS", "EncodedRequest", "ProtocolCodec", "load_service_model"]

#: Operations whose output shape holds only strings, integers, lists and structures of them,
#: so ``json.loads`` gives exactly what botocore's parser gives (a test checks the model).
JSON_ONLY_OUTPUTS = frozenset({"PutRecords"})


#: Per service (signing name), the fields the library reads from each operation's reply.
_SERVICE_REPLIES: Mapping[str, Mapping[str, Struct]] = {
    "kinesis": REPLIES,
    "dynamodb": DYNAMODB_REPLIES,
}


@functools.cache
def load_service_model(service: str = "kinesis") -> Any:
    """A service model that botocore ships (about 0.2 s to load; loaded once per service)."""
    return botocore.session.get_session().get_service_model(service)


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """The HTTP parts of one operation's request: what the signer and transport need.

    ``record_count`` is the number of records a PutRecords request carries, so that a reply
    with another number of results is caught (it would otherwise be matched up wrongly).
    ``epoch_timestamps``: a GetRecords reply's records carry ``ApproximateArrivalTimestamp``
    as float epoch seconds, not datetimes (see ``_records``).
    """

    operation: str
    headers: Mapping[str, str]
    body: bytes
    record_count: int | None = None
    epoch_timestamps: bool = False


# A PutRecords item's pieces, between its base64 data and its keys.
_DATA = b'{"Data":"'
_PARTITION_KEY = b'","PartitionKey":'
_EXPLICIT_HASH_KEY = b',"ExplicitHashKey":'
_ITEM_END = b"},"

JSON_STRINGS_LIMIT = 4096
"""How many keys' JSON strings are kept; past it, the keeping starts over."""

# A plain dict emptied when full, not an LRU: a known key is one lookup, and with keys that
# never repeat (UUIDs) an LRU's eviction doubled every key's cost.
_json_strings: dict[str, bytes] = {}


def _json_string(text: str) -> bytes:
    """``text`` as a JSON string, byte for byte as json.dumps writes it (kept: keys repeat)."""
    encoded = _json_strings.get(text)
    if encoded is None:
        if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
            encoded = b'"%b"' % text.encode("ascii")  # nothing json.dumps would escape
        else:
            encoded = json.dumps(text).encode("ascii")
        if len(_json_strings) >= JSON_STRINGS_LIMIT:
            _json_strings.clear()
        _json_strings[text] = encoded
    return encoded


class ProtocolCodec:
    """Encodes requests and decodes responses for every operation of the service model.

    ``service`` is the botocore service name (``"kinesis"``, ``"dynamodb"``), used when no
    ``service_model`` is given.
    """

    def __init__(self, service_model: Any | None = None, *, service: str = "kinesis") -> None:
        self._model = service_model if service_model is not None else load_service_model(service)
        self.service: str = self._model.signing_name
        self._kinesis = self.service == "kinesis"
        self._replies = _SERVICE_REPLIES.get(self.service, {})
        self._serializer = serialize.create_serializer("json", include_validation=False)
        self._validator = validate.ParamValidator()
        self._parser = parsers.JSONParser(timestamp_parser=utc_timestamp)
        self._event_parser = parsers.EventStreamJSONParser(timestamp_parser=utc_timestamp)
        self._operation_names = frozenset(self._model.operation_names)

    @property
    def operation_names(self) -> frozenset[str]:
        return self._operation_names

    def operation_model(self, operation: str) -> Any:
        if operation not in self._operation_names:
            raise errors.ValidationError(
                f"unknown {self._model.metadata.get('serviceId', self.service)} operation "
                f"{operation!r}; expected one of "
                f"{', '.join(sorted(self._operation_names))}",
                operation=operation,
            )
        return self._model.operation_model(operation)

    def encode(self, operation: str, params: Mapping[str, Any]) -> EncodedRequest:
        """Validate ``params`` against the model and serialize them.

        Raises :class:`~kinesis_actors.errors.ValidationError` for parameters the service
        would reject as malformed (missing, unknown, wrong type, out of range), before any
        network call.
        """
        model = self.operation_model(operation)
        report = self._validator.validate(dict(params), model.input_shape)
        if report.has_errors():
            raise errors.ValidationError(
                f"invalid parameters: {report.generate_report()}", operation=operation
            )
        request = self._serializer.serialize_to_request(dict(params), model)
        body = request["body"]
        if isinstance(body, str):
            body = body.encode("utf-8")
        count = len(params["Records"]) if self._kinesis and operation == "PutRecords" else None
        return EncodedRequest(operation, dict(request["headers"]), body, count)

    def encode_put_records(
        self, stream: str, records: Iterable[tuple[bytes, str, str | None]]
    ) -> EncodedRequest:
        """PutRecords of ``(data, partition_key, explicit_hash_key)`` records, hand-serialized.

        ``stream`` is a name or an ARN, checked by ``StreamRef.parse`` (sent as ``StreamARN``).

        Not validated: for records already checked the way the service checks them (the
        producer's ``prepare_record``: non-empty bytes, key lengths, sizes, hash key range).
        """
        # The JSON written as bytes, the same bytes json.dumps gives for the document (base64
        # needs no escaping; keys are escaped once, see _json_string): measured, 1.07 -> 0.33
        # us per 100-byte record, a dict, a str and the encoder's walk per record fewer. The
        # pieces are joined once, into the body: an item of its own per record copied every
        # aggregate's base64 (68 KB) once more (measured, 12 aggregates of 51 KB: 1.9-2.4 ms
        # a call -> 1.4).
        head = json.dumps(stream_params(stream), separators=(",", ":")).encode("utf-8")
        parts = [head[:-1], b',"Records":[']
        count = 0
        known = _json_strings.get  # a known key's string without a call of Python
        for data, key, hash_key in records:
            encoded = b2a_base64(data, newline=False)
            if hash_key is None:
                parts += (
                    _DATA,
                    encoded,
                    _PARTITION_KEY,
                    known(key) or _json_string(key),
                    _ITEM_END,
                )
            else:
                parts += (
                    _DATA,
                    encoded,
                    _PARTITION_KEY,
                    _json_string(key),
                    _EXPLICIT_HASH_KEY,
                    _json_string(hash_key),
                    _ITEM_END,
                )
            count += 1
        if count:
            parts[-1] = b"}]}"  # the last item's end, and the document's
        else:
            parts.append(b"]}")
        return EncodedRequest("PutRecords", self._put_records_headers, b"".join(parts), count)

    @functools.cached_property
    def _put_records_headers(self) -> Mapping[str, str]:
        # The protocol headers (target, content type) as botocore's serializer sets them.
        model = self.operation_model("PutRecords")
        request = self._serializer.serialize_to_request({"StreamName": "s", "Records": []}, model)
        return MappingProxyType(dict(request["headers"]))

    def decode(
        self,
        operation: str,
        status_code: int,
        headers: Mapping[str, str],
        body: bytes,
        *,
        record_count: int | None = None,
        epoch_timestamps: bool = False,
    ) -> dict[str, Any]:
        """The checked result of a successful response, or raise the typed error it carries.

        A 2xx reply that cannot be believed raises
        :class:`~kinesis_actors.errors.MalformedReplyError` (see ``_replies``);
        ``record_count`` is the PutRecords request's, to match its results against;
        ``epoch_timestamps`` gives GetRecords' arrival times as float epoch seconds.
        """
        checksum = headers.get("x-amz-crc32")
        if (
            checksum is not None
            # The checksum is of the bytes sent: a body httpx decompressed is not them.
            and headers.get("content-encoding", "identity") == "identity"
            and checksum != str(zlib.crc32(body))
        ):
            # A reply damaged on the way (botocore retries these too); an error's body is
            # not believed either, or a damaged ConditionalCheckFailed could read as another.
            raise malformed(
                operation, status_code, f"the body does not match its x-amz-crc32 ({checksum})"
            )
        if status_code >= 300:
            raise self.decode_error(operation, status_code, headers, body)
        if self._kinesis and operation == "GetRecords":
            with collector_held():
                records = load_reply(operation, status_code, body, empty_ok=False)
                return decode_get_records(records, status_code, epoch_timestamps=epoch_timestamps)
        output = self.operation_model(operation).output_shape
        document = load_reply(operation, status_code, body, empty_ok=output is None)
        spec = self._replies.get(operation)
        if spec is not None:
            problem = find_problem(spec, document, "")
        else:
            problem = (
                next(
                    (
                        f"{name} is missing"
                        for name in output.required_members
                        if document.get(name) is None
                    ),
                    None,
                )
                if output is not None
                else None
            )
        if problem is None and self._kinesis and operation == "PutRecords":
            problem = check_put_records(document, record_count)
        if problem is not None:
            raise malformed(operation, status_code, problem)
        if operation in JSON_ONLY_OUTPUTS:
            return document
        if output is None:
            return {}
        parsed: dict[str, Any] = self._parser.parse(
            {"status_code": status_code, "headers": dict(headers), "body": body}, output
        )
        parsed.pop("ResponseMetadata", None)
        return parsed

    def decode_error(
        self, operation: str, status_code: int, headers: Mapping[str, str], body: bytes
    ) -> errors.KinesisError:
        """The typed error for an error response (JSON ``__type`` and ``message``)."""
        code = ""
        message = ""
        try:
            document = json.loads(body) if body else {}
        except ValueError:
            document = {}
        if isinstance(document, dict):
            code = str(document.get("__type") or "")
            message = str(document.get("message") or document.get("Message") or "")
        if not code:
            code = headers.get("x-amzn-errortype", "") or (
                "InternalFailureException" if status_code >= 500 else "UnknownError"
            )
        if not message:
            message = body[:200].decode("utf-8", "replace") or f"HTTP {status_code}"
        error = errors.error_from_code(code, message, operation=operation, status_code=status_code)
        if isinstance(error, errors.ConditionalCheckFailedError) and isinstance(document, dict):
            error.item = self._failed_item(document, status_code, headers, body)
        return error

    def _failed_item(
        self,
        document: dict[str, Any],
        status_code: int,
        headers: Mapping[str, str],
        body: bytes,
    ) -> dict[str, Any] | None:
        """The item a ConditionalCheckFailedException carries (with
        ``ReturnValuesOnConditionCheckFailure``), parsed by botocore as boto3 gives it."""
        if not isinstance(document.get("Item"), dict):
            return None
        try:
            shape = self._model.shape_for("ConditionalCheckFailedException")
            parsed = self._parser.parse(
                {"status_code": status_code, "headers": dict(headers), "body": body}, shape
            )
        except Exception:  # a malformed extra never hides the error itself
            return None
        item = parsed.get("Item")
        return item if isinstance(item, dict) else None

    def event_stream_shape(self, operation: str) -> Any:
        """The event-stream union shape of a streaming operation (SubscribeToShard)."""
        shape = self.operation_model(operation).get_event_stream_output()
        if shape is None:
            raise errors.ValidationError(
                f"{operation} has no event stream output", operation=operation
            )
        return shape

    def decode_event(
        self,
        operation: str,
        shape: Any,
        headers: Mapping[str, Any],
        payload: bytes,
        *,
        epoch_timestamps: bool = False,
    ) -> dict[str, Any]:
        """Parse one event-stream message into ``{event_type: fields}``, or raise its error;
        ``epoch_timestamps`` gives the records' arrival times as float epoch seconds."""
        message_type = headers.get(":message-type")
        if message_type == "error":
            raise errors.error_from_code(
                str(headers.get(":error-code", "InternalFailureException")),
                str(headers.get(":error-message", "")),
                operation=operation,
                status_code=400,
            )
        if message_type == "event" and headers.get(":event-type") == "SubscribeToShardEvent":
            with collector_held():
                event = load_reply(operation, 200, payload, empty_ok=False)
                return {
                    "SubscribeToShardEvent": decode_subscribe_event(
                        event, epoch_timestamps=epoch_timestamps
                    )
                }
        status = 400 if message_type == "exception" else 200
        parsed: dict[str, Any] = self._event_parser.parse(
            {"status_code": status, "headers": dict(headers), "body": payload}, shape
        )
        if status != 200:
            error = parsed.get("Error", {})
            raise errors.error_from_code(
                str(error.get("Code") or headers.get(":exception-type") or "UnknownError"),
                str(error.get("Message") or ""),
                operation=operation,
                status_code=400,
            )
        return parsed
