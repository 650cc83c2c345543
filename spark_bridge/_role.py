"""The role options (``roleArn`` and its companions) and the per-process role sessions.

A task must not assume the role itself: a job of thousands of tasks would make thousands of
STS calls (STS throttles per account), and each task's session would start from nothing. The
options travel as :class:`RoleOptions` (plain, picklable); each Python process that opens a
client (the driver's, Spark's reused Python workers) turns them into one
:class:`~kinesis_actors.AssumeRole` kept for the life of the process and shared by every
task it runs: one AssumeRole call per process and role, renewed there ahead of expiry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from kinesis_actors import AssumeRole
from kinesis_actors.errors import ConfigError

__all__ = ["ROLE_OPTIONS", "RoleOptions", "assumed_role", "parse_role"]

#: The options, lower-cased as Spark hands them over.
ROLE_OPTIONS = frozenset(
    {"rolearn", "rolesessionname", "roleexternalid", "stsendpoint", "stsregion"}
)

#: AssumeRole's argument → the option that sets it, for error messages.
_OPTION_OF = {
    "role_arn": "roleArn",
    "session_name": "roleSessionName",
    "external_id": "roleExternalId",
    "sts_endpoint_url": "stsEndpoint",
    "sts_region": "stsRegion",
}

#: The most role sessions one process keeps (least recently used dropped first).
_MAX_SESSIONS = 16


@dataclass(frozen=True, slots=True)
class RoleOptions:
    """The role to assume, as the options gave it; ``sts_region`` None means the
    connection's region."""

    role_arn: str
    session_name: str = "kinesis-actors"
    external_id: str | None = field(default=None, repr=False)
    sts_endpoint: str | None = None
    sts_region: str | None = None


def parse_role(options: Mapping[str, str]) -> RoleOptions | None:
    """The role options of lower-cased ``options``, checked (a ConfigError names the option);
    None without ``roleArn``."""
    arn = options.get("rolearn")
    if arn is None:
        others = sorted(_OPTION_OF[k] for k in _OPTION_OF if k != "role_arn" and _given(options, k))
        if others:
            raise ConfigError(f"option {', '.join(others)} needs roleArn (the role to assume)")
        return None
    session_name = options.get("rolesessionname")
    sts_region = options.get("stsregion")
    if sts_region is not None and not sts_region.strip():
        raise ConfigError("option stsRegion must not be empty")
    role = RoleOptions(
        role_arn=arn.strip(),
        session_name="kinesis-actors" if session_name is None else session_name.strip(),
        external_id=options.get("roleexternalid"),
        sts_endpoint=options.get("stsendpoint"),
        sts_region=None if sts_region is None else sts_region.strip(),
    )
    try:
        _new_session(role, None, "us-east-1")  # checks every value; no call is made
    except ConfigError as exc:
        for argument, option in _OPTION_OF.items():
            prefix = f"AssumeRole.{argument} "
            if exc.message.startswith(prefix):
                raise ConfigError(f"option {option} {exc.message[len(prefix) :]}") from None
        raise
    return role


def _given(options: Mapping[str, str], argument: str) -> bool:
    return _OPTION_OF[argument].lower() in options


def _new_session(role: RoleOptions, base: tuple[str, ...] | None, region: str) -> AssumeRole:
    return AssumeRole(
        role.role_arn,
        session_name=role.session_name,
        external_id=role.external_id,
        sts_endpoint_url=role.sts_endpoint,
        sts_region=role.sts_region or region,
        credentials=base,
    )


_sessions: OrderedDict[tuple[object, ...], AssumeRole] = OrderedDict()
_sessions_lock = threading.Lock()


def assumed_role(role: RoleOptions, base: tuple[str, ...] | None, region: str) -> AssumeRole:
    """This process's session of ``role``, assumed with ``base`` (None: botocore's chain)
    and STS in ``region`` unless ``stsRegion`` says otherwise; made on first use, then
    shared. Nothing is called here: the first client that opens with it assumes the role."""
    # The base secret is part of the key (other keys, another session), and stays in memory.
    key = (role, base, region)
    with _sessions_lock:
        session = _sessions.get(key)
        if session is None:
            session = _sessions[key] = _new_session(role, base, region)
            while len(_sessions) > _MAX_SESSIONS:
                _sessions.popitem(last=False)
        else:
            _sessions.move_to_end(key)
        return session
