"""httpx's per-request INFO lines, for our clients' requests, at DEBUG.

httpx logs every request at INFO on the ``httpx`` logger (``HTTP Request: POST https://...
"HTTP/2 200 OK"``). A user who turns on INFO to see what the library decided would read a line
per PutRecords. So, for the requests our HTTP/2 transport makes (marked by a context variable
while httpx runs them), :class:`OurRequestsAtDebug` turns the line into a DEBUG record and
lets it through only when the ``httpx`` logger is enabled for DEBUG: a user gets the lines
back with ``logging.getLogger("httpx").setLevel(logging.DEBUG)``. Requests of other httpx
clients in the process are left as httpx logs them.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

__all__ = ["OUR_REQUEST", "OurRequestsAtDebug", "quiet_httpx"]

#: True while one of our clients' requests runs inside httpx.
OUR_REQUEST: ContextVar[bool] = ContextVar("kinesis_actors_request", default=False)

_HTTPX = logging.getLogger("httpx")


class OurRequestsAtDebug(logging.Filter):
    """On the ``httpx`` logger: our requests' INFO lines become DEBUG records, kept only when
    that logger is enabled for DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not OUR_REQUEST.get():
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return _HTTPX.isEnabledFor(logging.DEBUG)


def quiet_httpx() -> None:
    """Install the filter on the ``httpx`` logger, once per process."""
    if not any(isinstance(existing, OurRequestsAtDebug) for existing in _HTTPX.filters):
        _HTTPX.addFilter(OurRequestsAtDebug())
