"""Stopping the etcd store's tasks: a task that swallowed its cancellation (as Python 3.11's
`asyncio.wait_for` can, inside aetcd's watch set-up) is cancelled again until it ends."""

from __future__ import annotations

import asyncio

from broker.store.etcd_store import cancel_until_done


async def _swallows_one_cancel(stream: asyncio.Event) -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass  # lost, as in wait_for: the task goes on to wait on its stream
    await stream.wait()


async def _failing() -> None:
    raise OSError("the watch broke")


def test_a_task_that_swallowed_a_cancel_is_cancelled_again_until_it_ends() -> None:
    async def scenario() -> list[asyncio.Task[None]]:
        stream = asyncio.Event()  # never set: only a second cancel ends the task
        tasks = [asyncio.create_task(_swallows_one_cancel(stream)), asyncio.create_task(_failing())]
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_until_done(tasks), 5)
        return tasks

    tasks = asyncio.run(scenario())
    assert tasks[0].cancelled()
    assert isinstance(tasks[1].exception(), OSError)


def test_no_tasks() -> None:
    asyncio.run(cancel_until_done([]))
