"""The ``kinesis`` data source's options, parsed and checked before any network call.

Spark hands options over as a case-insensitive mapping of strings. Everything here turns them
into small frozen dataclasses that pickle (they travel to executors inside partitions and
writers) and raises :class:`~kinesis_actors.errors.ConfigError` naming the option otherwise.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kinesis_actors.client import ClientConfig, StreamRef
from kinesis_actors.errors import ConfigError

from ._offsets import ShardEntry
from ._role import ROLE_OPTIONS, RoleOptions, assumed_role, parse_role
from ._starts import parse_starting_positions

__all__ = [
    "Connection",
    "SinkOptions",
    "SourceOptions",
    "closest",
    "parse_connection",
    "parse_sink_options",
    "parse_source_options",
    "spelled",
]

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}

CONNECTION_OPTIONS = frozenset(
    {"streamname", "path", "region", "endpointurl", "verifyssl", "opentimeout"}
    | {"awsaccesskeyid", "awssecretkey", "sessiontoken"}
    | ROLE_OPTIONS
)
SOURCE_OPTIONS = CONNECTION_OPTIONS | {
    "consumermode",
    "consumername",
    "registration",
    "initialposition",
    "startingpositions",
    "maxrecordspertrigger",
    "maxbytespertrigger",
    "replaytimeout",
    "deregisterconsumer",
    "arrivalwindowpertrigger",
    "settlelag",
    "readpath",
    "shardspertask",
    "maxfetchrate",
}
REMOVED_SOURCE_OPTIONS = {
    "maxstagedrecords": "maxStagedRecords",
    "maxstagedbytes": "maxStagedBytes",
}
"""Options of the removed ``readPath=driver`` (they bounded the rows its driver staged)."""
SINK_OPTIONS = CONNECTION_OPTIONS | {
    "aggregation",
    "queuelimitrecords",
    "flushtimeout",
    "checkpointlocation",
}

#: Every option as docs/spark.md spells it; messages name options this way (Spark hands them
#: over lowercased).
SPELLING = {
    name.lower(): name
    for name in (
        "streamName",
        "path",
        "region",
        "endpointUrl",
        "verifySsl",
        "openTimeout",
        "awsAccessKeyId",
        "awsSecretKey",
        "sessionToken",
        "roleArn",
        "roleSessionName",
        "roleExternalId",
        "stsEndpoint",
        "stsRegion",
        "consumerMode",
        "consumerName",
        "registration",
        "initialPosition",
        "startingPositions",
        "maxRecordsPerTrigger",
        "maxBytesPerTrigger",
        "replayTimeout",
        "deregisterConsumer",
        "arrivalWindowPerTrigger",
        "settleLag",
        "readPath",
        "shardsPerTask",
        "maxFetchRate",
        "aggregation",
        "queueLimitRecords",
        "flushTimeout",
        "checkpointLocation",
    )
}


def spelled(name: str) -> str:
    """``name`` (any case) as docs/spark.md spells it."""
    return SPELLING.get(name.lower(), name)


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` (case aside), if one is close enough to be a typo."""
    by_lower = {candidate.lower(): candidate for candidate in candidates}
    found = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[found[0]] if found else None


@dataclass(frozen=True, slots=True)
class Connection:
    """Where and as whom to talk to Kinesis: ``KinesisClient``'s arguments, picklable.

    With ``role``, ``credentials`` (or botocore's chain) are what the role is assumed with,
    once per process (see ``_role``)."""

    region: str = "us-east-1"
    endpoint_url: str | None = None
    verify: bool = True
    credentials: tuple[str, str] | tuple[str, str, str] | None = field(default=None, repr=False)
    role: RoleOptions | None = None
    #: ``ClientConfig.open_timeout``: how long an endpoint never reached is tried.
    open_timeout: float = 30.0

    def client_kwargs(self) -> dict[str, Any]:
        """``KinesisClient``'s keyword arguments (``config`` is ``SyncProducer``'s
        ``client_config``)."""
        credentials: Any = self.credentials
        if self.role is not None:
            credentials = assumed_role(self.role, self.credentials, self.region)
        return {
            "region": self.region,
            "endpoint_url": self.endpoint_url,
            "verify": self.verify,
            "credentials": credentials,
            "config": ClientConfig(open_timeout=self.open_timeout),
        }


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The streaming source's options (see docs/spark.md for each one).

    ``streams`` are the streams' names, their keys in offsets and rows whichever way they were
    given; ``refs`` are the same streams as given (a name, or an ARN: what the calls send),
    empty when every one was given by name.
    """

    streams: tuple[str, ...]
    connection: Connection
    mode: str = "polling"
    consumer_name: str | None = None
    registration: str = "lazy"
    initial_position: str = "trim_horizon"
    initial_timestamp: datetime | None = None
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    replay_timeout: float = 120.0
    deregister_consumer: bool = False
    window_ms: int = 10_000
    settle_ms: int = 1_000
    refs: tuple[str, ...] = ()
    starting_positions: Mapping[tuple[str, str], ShardEntry] = field(default_factory=dict)
    """``startingPositions``: a new query's start for the shards it names."""
    shards_per_task: int | None = None
    """Shards one Spark task reads; None: automatic (``_grouping``)."""
    max_fetch_rate: float | None = None
    """``maxFetchRate`` in bytes a second per shard a task reads (None: the service's 2 MiB/s
    is the only bound)."""

    def ref(self, stream: str) -> str:
        """What the calls for ``stream`` (one of ``streams``) name: its ARN if given by one."""
        for name, given in zip(self.streams, self.refs, strict=False):
            if name == stream:
                return given
        return stream


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's options: the stream (its name or ARN, as given), the connection and the
    producer's knobs."""

    stream: str
    connection: Connection
    aggregation: bool = True
    queue_limit_records: int = 10_000
    flush_timeout: float = 300.0


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items()}


def _unknown(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    """A ConfigError for the first unknown option: the closest known name, if one is near,
    and every known one (the message is all a user without a checkout has)."""
    unknown = sorted(set(options) - known)
    if not unknown:
        return
    name = unknown[0]
    names = sorted(spelled(option) for option in known if option != "path")
    guess = closest(name, names)
    hint = f"; did you mean {guess!r}?" if guess is not None else ""
    others = f" (and {len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""
    raise ConfigError(
        f"unknown {what} option {name!r}{hint}{others} (Spark passes option names lowercased; "
        f"any case works). The {what}'s options: {', '.join(names)}"
    )


_DRIVER_REMOVED = (
    "that path read every record on the driver, one process for "
    "the whole stream, and shipped the rows inside the tasks (about 11 MB a task for 200,000 "
    "rows). The executors read each micro-batch's ranges, with GetRecords under either "
    "consumerMode. Drop the option; a checkpoint written with it resumes (its version-1 "
    "offsets load). See docs/spark.md, 'readPath=driver (removed)'"
)


def _removed(options: Mapping[str, str]) -> None:
    """A ConfigError for an option of the removed ``readPath=driver``, saying why and what to
    do; ``readPath=executors`` (what every query does) stays accepted, a no-op."""
    for lowered, name in sorted(REMOVED_SOURCE_OPTIONS.items()):
        if lowered in options:
            raise ConfigError(
                f"option {name} was removed with readPath=driver, whose staging on the driver "
                f"it bounded: {_DRIVER_REMOVED}"
            )
    raw = options.get("readpath")
    if raw is None or raw.strip().lower() == "executors":
        return
    if raw.strip().lower() == "driver":
        raise ConfigError(f"option readPath=driver was removed: {_DRIVER_REMOVED}")
    raise ConfigError(f"option readPath must be executors (the only read path), got {raw!r}")


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"option {name} must be true or false, got {raw!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"option {name} must be a positive integer, got {raw!r}")
    return value


def _positive_float(options: Mapping[str, str], name: str) -> float | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name} must be a positive number, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"option {name} must be a positive number, got {raw!r}")
    return value


def _mb_per_second(options: Mapping[str, str], name: str) -> float | None:
    """A rate given in MB/s (Databricks' unit for ``maxFetchRate``), as bytes a second."""
    value = _positive_float(options, name)
    return None if value is None else value * 1_000_000


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration_ms(options: Mapping[str, str], name: str, default_ms: int) -> int:
    """A duration: seconds as a number, or with a unit: ``500ms``, ``10s``, ``2m``, ``1h``."""
    raw = options.get(name.lower())
    if raw is None:
        return default_ms
    text = raw.strip().lower().replace(" ", "")
    unit = 1.0
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            text, unit = text[: -len(suffix)], _UNITS[suffix]
            break
    try:
        value = float(text) * unit
    except ValueError:
        raise ConfigError(
            f"option {name} must be a duration such as 10s, 500ms or 2m, got {raw!r}"
        ) from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"option {name} must be a positive duration, got {raw!r}")
    return max(1, round(value * 1000))


def _choice(options: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"option {name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def _stream_refs(options: Mapping[str, str], region: str) -> dict[str, str]:
    """``streamName``: each stream's name → its name or ARN as given (checked, the ARN in the
    connection's region)."""
    raw = options.get("streamname") or options.get("path")
    if raw is None or not raw.strip():
        raise ConfigError("option streamName is required (the Kinesis stream to use)")
    given = tuple(name.strip() for name in raw.split(","))
    if any(not name for name in given):
        raise ConfigError(f"option streamName has an empty stream name: {raw!r}")
    refs: dict[str, str] = {}
    for value in given:
        name = StreamRef.parse(value, option="option streamName", region=region).name
        if name in refs:
            raise ConfigError(f"option streamName names a stream twice: {raw!r}")
        refs[name] = value
    return refs


def parse_connection(options: Mapping[str, str]) -> Connection:
    """The connection options shared by the source, the sink and ``partition_writer``."""
    options = _lower(options)
    key = options.get("awsaccesskeyid")
    secret = options.get("awssecretkey")
    token = options.get("sessiontoken")
    credentials: tuple[str, str] | tuple[str, str, str] | None = None
    if (key is None) != (secret is None):
        raise ConfigError("options awsAccessKeyId and awsSecretKey must be given together")
    if key is not None and secret is not None:
        credentials = (key, secret, token) if token else (key, secret)
    elif token is not None:
        raise ConfigError("option sessionToken needs awsAccessKeyId and awsSecretKey")
    region = options.get("region", "us-east-1").strip()
    if not region:
        raise ConfigError("option region must not be empty")
    endpoint = options.get("endpointurl")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"option endpointUrl must start with http:// or https://: {endpoint!r}")
    open_timeout = _positive_float(options, "openTimeout")
    return Connection(
        region,
        endpoint,
        _bool(options, "verifySsl", True),
        credentials,
        parse_role(options),
        30.0 if open_timeout is None else open_timeout,
    )


def _initial_position(options: Mapping[str, str]) -> tuple[str, datetime | None]:
    raw = options.get("initialposition")
    if raw is None:
        return "trim_horizon", None
    value = raw.strip()
    lowered = value.lower()
    if lowered in ("trim_horizon", "earliest"):
        return "trim_horizon", None
    if lowered == "latest":
        return "latest", None
    if lowered.startswith("at_timestamp:"):
        stamp = value.split(":", 1)[1]
        try:
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"option initialPosition: {stamp!r} is not an ISO-8601 timestamp "
                "(use at_timestamp:2026-01-31T12:00:00Z)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        if when > datetime.now(UTC):
            raise ConfigError(f"option initialPosition: {stamp!r} is in the future")
        return "at_timestamp", when
    raise ConfigError(
        "option initialPosition must be trim_horizon, latest or at_timestamp:<ISO-8601>, "
        f"got {raw!r}"
    )


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Check every source option; the first bad one raises a ConfigError naming it."""
    options = _lower(options)
    _removed(options)
    _unknown(options, SOURCE_OPTIONS, "source")
    connection = parse_connection(options)
    refs = _stream_refs(options, connection.region)
    mode = _choice(options, "consumerMode", ("polling", "efo"), "polling")
    # Checked, though the source subscribes to nothing (every mode reads with GetRecords:
    # docs/spark.md, "EFO"): so neither an http endpoint nor registration=none is refused.
    registration = _choice(options, "registration", ("lazy", "eager", "none"), "lazy")
    name = options.get("consumername")
    if name is not None and not name.strip():
        raise ConfigError("option consumerName must not be empty")
    position, stamp = _initial_position(options)
    starts = parse_starting_positions(options.get("startingpositions"), tuple(refs))
    max_records = _positive_int(options, "maxRecordsPerTrigger")
    max_bytes = _positive_int(options, "maxBytesPerTrigger")
    replay = _positive_float(options, "replayTimeout")
    return SourceOptions(
        streams=tuple(refs),
        refs=() if all(name == given for name, given in refs.items()) else tuple(refs.values()),
        connection=connection,
        mode=mode,
        consumer_name=name.strip() if name else None,
        registration=registration,
        initial_position=position,
        initial_timestamp=stamp,
        starting_positions=starts,
        max_records_per_trigger=max_records,
        max_bytes_per_trigger=max_bytes,
        replay_timeout=replay or 120.0,
        deregister_consumer=_bool(options, "deregisterConsumer", False),
        window_ms=_duration_ms(options, "arrivalWindowPerTrigger", 10_000),
        settle_ms=_duration_ms(options, "settleLag", 1_000),
        shards_per_task=_positive_int(options, "shardsPerTask"),
        max_fetch_rate=_mb_per_second(options, "maxFetchRate"),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check every sink option; the first bad one raises a ConfigError naming it."""
    if not options:
        # Spark hands a Python data source no options from SQL's INSERT INTO a table created
        # USING kinesis (the table's OPTIONS stay in the catalog): say so, not "streamName".
        raise ConfigError(
            "the kinesis sink got no options at all (streamName is required): Spark SQL's "
            "INSERT INTO a table created USING kinesis passes a Python data source none; "
            'write with df.write.format("kinesis").option("streamName", ...) or writeStream'
        )
    options = _lower(options)
    _unknown(options, SINK_OPTIONS, "sink")
    connection = parse_connection(options)
    refs = _stream_refs(options, connection.region)
    if len(refs) != 1:
        raise ConfigError("option streamName: the sink writes to exactly one stream")
    return SinkOptions(
        stream=next(iter(refs.values())),
        connection=connection,
        aggregation=_bool(options, "aggregation", True),
        queue_limit_records=_positive_int(options, "queueLimitRecords") or 10_000,
        flush_timeout=_positive_float(options, "flushTimeout") or 300.0,
    )
