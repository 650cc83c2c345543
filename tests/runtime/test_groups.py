"""unwrap_sole: a task group's wrapping of one exception is undone at the API edge."""

from __future__ import annotations

import sys
import traceback

import anyio
import pytest

from kinesis_actors.runtime import raise_as_itself, sole_exception, unwrap_sole

pytestmark = pytest.mark.anyio


def test_the_sole_exception_is_found_through_nested_groups_of_one() -> None:
    leaf = KeyError("k")
    assert sole_exception(ExceptionGroup("g", [leaf])) is leaf
    assert sole_exception(BaseExceptionGroup("outer", [ExceptionGroup("inner", [leaf])])) is leaf
    assert sole_exception(ExceptionGroup("g", [leaf, ValueError()])) is None
    assert sole_exception(BaseExceptionGroup("g", [ExceptionGroup("i", [leaf, leaf])])) is None


async def test_a_body_exception_leaves_a_task_group_as_itself() -> None:
    raised = KeyError("the user's")
    with pytest.raises(KeyError) as caught, unwrap_sole():
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep_forever)
            raise raised
    assert caught.value is raised
    assert caught.value.__context__ is None  # not chained to the group it was taken out of


async def test_a_childs_failure_leaves_as_itself_with_its_own_traceback() -> None:
    async def fails() -> None:
        raise ValueError("in a child task")

    with pytest.raises(ValueError, match="in a child task") as caught, unwrap_sole():
        async with anyio.create_task_group() as tg:
            tg.start_soon(fails)
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "fails" in frames


@pytest.mark.parametrize("exit_exception", [SystemExit(3), KeyboardInterrupt()])
async def test_system_exit_and_keyboard_interrupt_leave_as_themselves(
    exit_exception: BaseException,
) -> None:
    with pytest.raises(type(exit_exception)) as caught, unwrap_sole():
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep_forever)
            raise exit_exception
    assert caught.value is exit_exception
    if isinstance(caught.value, SystemExit):
        assert caught.value.code == 3


async def test_several_failures_stay_a_group() -> None:
    async def fails(n: int) -> None:
        raise ValueError(n)

    with pytest.raises(ExceptionGroup) as caught, unwrap_sole():
        async with anyio.create_task_group() as tg:
            tg.start_soon(fails, 1)
            tg.start_soon(fails, 2)
    assert sorted(exc.args[0] for exc in caught.value.exceptions) == [1, 2]


async def test_a_cancellation_is_not_touched() -> None:
    with anyio.move_on_after(0.01) as scope:
        with unwrap_sole():
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.sleep_forever)
                await anyio.sleep_forever()
    assert scope.cancelled_caught


def test_raising_as_itself_keeps_the_exceptions_own_cause_and_context() -> None:
    try:
        try:
            raise OSError("the original context")
        except OSError:
            leaf = KeyError("leaf")
            leaf.__cause__ = RuntimeError("its cause")
            try:
                raise leaf
            except KeyError:
                pass
    except OSError:  # pragma: no cover - not raised
        pass
    context = leaf.__context__
    assert isinstance(context, OSError)
    try:
        raise ExceptionGroup("wrapper", [leaf])
    except ExceptionGroup:
        with pytest.raises(KeyError) as caught:
            raise_as_itself(leaf)
    assert caught.value.__context__ is context
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert sys.exc_info() == (None, None, None)
