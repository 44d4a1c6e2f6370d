"""The connection's answer queue (broker/front/answers.py): FIFO, bounded, one reader and one
writer, as asyncio.Queue was."""

from __future__ import annotations

import asyncio

from broker.front.answers import AnswerQueue


async def test_fifo_and_the_bound_holds_the_writer() -> None:
    queue: AnswerQueue[int | None] = AnswerQueue(2)
    await queue.put(1)
    await queue.put(2)
    third = asyncio.create_task(queue.put(3))
    await asyncio.sleep(0)
    assert not third.done()  # full: the writer waits for room
    assert await queue.get() == 1
    await third
    assert [await queue.get(), queue.get_nowait()] == [2, 3]
    assert queue.empty()


async def test_the_reader_waits_for_the_next_item_and_survives_a_cancel() -> None:
    queue: AnswerQueue[str] = AnswerQueue(5)
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await queue.put("a")  # waking a cancelled reader is no error
    reader = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert reader.done() and reader.result() == "a"
