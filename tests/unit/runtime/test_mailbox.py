"""The mailbox under the actor kernel: bounds, FIFO of blocked senders, cancellation, close."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from runtime.mailbox import Mailbox, MailboxClosed, MailboxFull


async def eventually(condition: Callable[[], bool], *, turns: int = 100) -> None:
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def test_blocked_senders_get_room_in_arrival_order() -> None:
    mailbox: Mailbox[str] = Mailbox(1)
    mailbox.put_nowait("first")
    senders = [asyncio.create_task(mailbox.put(name)) for name in ("a", "b", "c")]
    await eventually(lambda: mailbox.blocked_senders == 3)
    received = [await mailbox.get() for _ in range(4)]
    await asyncio.gather(*senders)
    assert received == ["first", "a", "b", "c"]


async def test_a_cancelled_sender_passes_its_turn_on() -> None:
    mailbox: Mailbox[str] = Mailbox(1)
    mailbox.put_nowait("first")
    quitter = asyncio.create_task(mailbox.put("quitter"))
    patient = asyncio.create_task(mailbox.put("patient"))
    await eventually(lambda: mailbox.blocked_senders == 2)
    assert await mailbox.get() == "first"  # wakes the quitter ...
    quitter.cancel()  # ... which leaves before using the room
    assert await mailbox.get() == "patient"
    await patient
    with pytest.raises(asyncio.CancelledError):
        await quitter
    assert len(mailbox) == 0


async def test_close_wakes_everyone_and_keeps_queued_items_for_drain() -> None:
    mailbox: Mailbox[int] = Mailbox(2)
    mailbox.put_nowait(1)
    mailbox.put_nowait(2)
    with pytest.raises(MailboxFull):
        mailbox.put_nowait(3)
    blocked = asyncio.create_task(mailbox.put(3))
    await eventually(lambda: mailbox.blocked_senders == 1)
    mailbox.close()
    with pytest.raises(MailboxClosed):
        await blocked
    assert await mailbox.get() == 1
    assert mailbox.drain() == [2]
    with pytest.raises(MailboxClosed):
        await mailbox.get()
    with pytest.raises(MailboxClosed):
        mailbox.put_nowait(4)


async def test_a_waiting_consumer_wakes_on_put_and_on_close() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    getter = asyncio.create_task(mailbox.get())
    await asyncio.sleep(0)
    mailbox.put_nowait(7)
    assert await getter == 7
    getter = asyncio.create_task(mailbox.get())
    await asyncio.sleep(0)
    mailbox.close()
    with pytest.raises(MailboxClosed):
        await getter


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Mailbox[int](0)
