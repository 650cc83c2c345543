"""A user's exception is the user's: undo the exception group a task group wraps one error in.

anyio's task groups (and trio's nurseries) always raise an :class:`ExceptionGroup`, even for a
single error, and even for the exception of the code running *inside* them: a ``KeyError``
raised in the body of a context manager that owns a task group reaches the caller as
``ExceptionGroup([KeyError])``, which ``except KeyError`` does not catch, and a ``sys.exit(0)``
there exits 1 with a group traceback. A group is for code that asked for concurrency; a
library's context manager did not ask its caller to. So at the API edge:

* a group that holds one exception (through groups nested one in another) is re-raised as
  that exception, with its own traceback, cause and context;
* a group of several is left alone: they are several failures, and hiding all but one would
  lose them (the library turns its own into one typed error before they get here).

Usage, around whatever exits a task group::

    with unwrap_sole():
        await self._task_group.__aexit__(exc_type, exc, tb)
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType

__all__ = ["raise_as_itself", "sole_exception", "unwrap_sole"]


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception ``group`` holds, looking through nested groups of one; None when it
    holds more than one (or none)."""
    current: BaseException = group
    while isinstance(current, BaseExceptionGroup):
        if len(current.exceptions) != 1:
            return None
        current = current.exceptions[0]
    return current


def raise_as_itself(exc: BaseException) -> None:
    """Raise ``exc`` keeping its own ``__context__``.

    Raised while another exception (the group) is being handled, Python would chain that one
    as the context, and the traceback would show the same error twice, once inside the group.
    """
    context, suppress = exc.__context__, exc.__suppress_context__
    try:
        raise exc
    finally:
        exc.__context__, exc.__suppress_context__ = context, suppress


def unwrap_sole() -> AbstractContextManager[None]:
    """A context manager that re-raises a group of one exception as that exception.

    It works around ``await`` as well (it has nothing to await, so it is not an async one).
    Anything else, a group of several included, passes unchanged.
    """
    return _UnwrapSole()


class _UnwrapSole:
    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, BaseExceptionGroup):
            sole = sole_exception(exc)
            if sole is not None:
                raise_as_itself(sole)
