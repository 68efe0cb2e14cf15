"""The actor kernel: single-owner state behind a bounded mailbox.

An actor's state is touched only by its own task, which takes one message at a time from its
mailbox and runs the handler registered for the message's type. That serialisation is what
replaces Kafka's locks (`leaderIsrUpdateLock`, `replicaStateChangeLock`, `controllerLock`): two
handlers of one actor never interleave, even when a handler awaits, because the next message is
not taken until the current handler returns.

* `tell(msg)` enqueues and waits for room (backpressure); `try_tell(msg)` fails fast with
  `MailboxFull`; `ask(msg)` enqueues and returns the handler's result or raises its exception.
* Handlers are methods marked `@handles(MessageType, ...)`, sync or async; dispatch is one dict
  lookup on the message's exact type.
* A handler's exception fails that message only (the asker gets it; a told message's failure is
  logged). A handler that finds the actor's state unusable raises `ActorFatalError`: the actor
  stops, rejects what is queued, and its supervisor callback decides what happens next.
* `stop()` closes the mailbox at once (senders get `MailboxClosed`), then either processes what is
  queued (`drain=True`) or rejects it with `MailboxClosed`; either way no `ask` is left hanging. A
  handler that is running is never cancelled midway, since that could leave the state half-changed.
* The actor's task runs in a task group the owner passes to `start()` (structured concurrency: the
  node's task group outlives its actors) or, without one, in a task the actor owns; `stop()`
  returns only when that task has finished.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup

from runtime.clock import NS_PER_MS, Clock, SystemClock
from runtime.mailbox import Mailbox, MailboxClosed, MailboxError, MailboxFull

__all__ = [
    "Actor",
    "ActorFatalError",
    "ActorStatistics",
    "Ask",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "UnhandledMessageError",
    "handles",
]

log = logging.getLogger(__name__)

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_MAILBOX_CAPACITY = 1024


class Ask(Generic[R]):
    """Base for messages sent with `ask`; `R` is the type of the handler's reply."""

    __slots__ = ()


class ActorFatalError(Exception):
    """Raised by a handler when the actor's state can no longer be trusted; stops the actor."""


class UnhandledMessageError(TypeError):
    """No handler is registered for the message's type."""


@dataclass(frozen=True, slots=True)
class ActorStatistics:
    name: str
    depth: int
    capacity: int
    blocked_senders: int
    processed: int
    failed: int
    max_wait_ms: float
    running: bool


@dataclass(frozen=True, slots=True)
class _Handler:
    function: Callable[..., Any]
    is_async: bool


# (message, reply future or None for tell, monotonic ns when enqueued)
_Envelope = tuple[object, "asyncio.Future[Any] | None", int]

Supervisor = Callable[["Actor", BaseException], None]


def handles(*message_types: type[Any]) -> Callable[[F], F]:
    """Mark a method as the handler of these message types."""
    if not message_types:
        raise TypeError("handles() needs at least one message type")

    def mark(function: F) -> F:
        function.__ketch_handles__ = message_types  # type: ignore[attr-defined]
        return function

    return mark


class Actor:
    """Subclass, add `@handles(...)` methods, then `await start()` and `await stop()`."""

    _handlers: ClassVar[dict[type[Any], _Handler]] = {}
    mailbox_capacity: ClassVar[int] = DEFAULT_MAILBOX_CAPACITY

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Inherited handlers first; a subclass may override them, but may not register two
        # handlers of its own for one type.
        handlers = dict(cls._handlers)
        own: set[type[Any]] = set()
        for attribute in vars(cls).values():
            for message_type in getattr(attribute, "__ketch_handles__", ()):
                if message_type in own:
                    raise TypeError(f"{cls.__name__}: two handlers for {message_type.__name__}")
                own.add(message_type)
                handlers[message_type] = _Handler(attribute, inspect.iscoroutinefunction(attribute))
        cls._handlers = handlers

    def __init__(
        self,
        name: str,
        *,
        clock: Clock | None = None,
        capacity: int | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.name = name
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._mailbox: Mailbox[_Envelope] = Mailbox(
            capacity if capacity is not None else self.mailbox_capacity, name=f"{name} mailbox"
        )
        self._supervisor = supervisor
        self._processed = 0
        self._failed = 0
        self._max_wait_ns = 0
        self._started = False
        self._finished = anyio.Event()
        self._own_task: asyncio.Task[None] | None = None
        self._periodic: list[asyncio.Task[None]] = []
        self.failure: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, task_group: TaskGroup | None = None) -> None:
        """Start processing messages, in `task_group` if given, else in a task of its own."""
        if self._started:
            raise RuntimeError(f"{self.name} was already started")
        self._started = True
        if task_group is not None:
            task_group.start_soon(self._run, name=self.name)
        else:
            self._own_task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self, *, drain: bool = True) -> None:
        """Stop accepting messages; process (`drain`) or reject what is queued; wait for the
        actor's task to finish."""
        self._mailbox.close()
        if not drain or not self._started:
            self._reject_queued()
        if self._started:
            await self._finished.wait()
        if self._own_task is not None:
            await self._own_task

    @property
    def running(self) -> bool:
        return self._started and not self._finished.is_set()

    async def on_start(self) -> None:
        """Runs in the actor's task before the first message."""

    def every(self, interval_ms: int, action: Callable[[], None]) -> None:
        """Call `action` every `interval_ms` on the actor's clock (from `on_start` or a
        handler), until the actor stops: the schedule's task is the actor's and is cancelled
        before `on_stop`. The action runs outside the mailbox, so it should only read published
        state or tell the actor a message; an exception is logged and the next round runs."""

        async def loop() -> None:
            while True:
                await self.clock.sleep(interval_ms / 1000)
                try:
                    action()
                except Exception:
                    log.exception("%s: periodic action failed", self.name)

        task = asyncio.get_running_loop().create_task(loop(), name=f"{self.name}-every")
        self._periodic.append(task)

    async def on_stop(self) -> None:
        """Runs in the actor's task after the last message."""

    # -- sending ---------------------------------------------------------------------------

    async def tell(self, message: object) -> None:
        await self._mailbox.put((message, None, self.clock.monotonic_ns()))

    def try_tell(self, message: object) -> None:
        self._mailbox.put_nowait((message, None, self.clock.monotonic_ns()))

    async def ask(self, message: Ask[R]) -> R:
        reply: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        await self._mailbox.put((message, reply, self.clock.monotonic_ns()))
        return await reply

    async def settled(self, answer: asyncio.Future[R]) -> R:
        """Wait for `answer`, a future a handler returned to be settled later (after a write,
        a rebalance); raise MailboxClosed if the actor stops first without settling it, so a
        caller is never left waiting on an answer that died with the actor's state."""
        if not answer.done():
            stopped = asyncio.get_running_loop().create_task(self._finished.wait())
            try:
                await asyncio.wait((answer, stopped), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
            if not answer.done():
                raise MailboxClosed(f"{self.name} stopped before answering")
        return answer.result()

    def statistics(self) -> ActorStatistics:
        return ActorStatistics(
            name=self.name,
            depth=len(self._mailbox),
            capacity=self._mailbox.capacity,
            blocked_senders=self._mailbox.blocked_senders,
            processed=self._processed,
            failed=self._failed,
            max_wait_ms=self._max_wait_ns / NS_PER_MS,
            running=self.running,
        )

    # -- the actor's task ------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self.on_start()
            while True:
                try:
                    envelope = await self._mailbox.get()
                except MailboxClosed:
                    break
                if not await self._dispatch(envelope):
                    break
            await self._stop_periodic()
            await self.on_stop()
        except Exception as error:
            # on_start / on_stop failed: the supervisor decides, as for a fatal handler error.
            # Cancellation (the owner's task group) propagates; the finally still answers asks.
            log.exception("%s: stopped by an error outside a handler", self.name)
            self._fail(error)
        finally:
            for task in self._periodic:  # already done on a normal stop; here for errors
                task.cancel()
            self._mailbox.close()
            self._reject_queued()
            self._finished.set()

    async def _stop_periodic(self) -> None:
        tasks, self._periodic = self._periodic, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _dispatch(self, envelope: _Envelope) -> bool:
        """Run one message's handler; False if the actor must stop."""
        message, reply, enqueued_ns = envelope
        waited_ns = self.clock.monotonic_ns() - enqueued_ns
        if waited_ns > self._max_wait_ns:
            self._max_wait_ns = waited_ns
        handler = self._handlers.get(type(message))
        try:
            if handler is None:
                raise UnhandledMessageError(f"{self.name}: no handler for {type(message).__name__}")
            result = handler.function(self, message)
            if handler.is_async:
                result = await result
        except asyncio.CancelledError:
            if reply is not None and not reply.done():
                reply.set_exception(MailboxClosed(f"{self.name} stopped while handling"))
            raise
        except ActorFatalError as error:
            self._failed += 1
            log.error("%s: fatal error handling %s: %s", self.name, type(message).__name__, error)
            if reply is not None and not reply.done():
                reply.set_exception(error)
            self._fail(error)
            return False
        except Exception as error:
            self._failed += 1
            log.exception("%s: failed to handle %s", self.name, type(message).__name__)
            if reply is not None and not reply.done():
                reply.set_exception(error)
            return True
        self._processed += 1
        if reply is not None and not reply.done():
            reply.set_result(result)
        return True

    def _fail(self, error: BaseException) -> None:
        self.failure = error
        self._mailbox.close()
        self._reject_queued()
        if self._supervisor is not None:
            try:
                self._supervisor(self, error)
            except Exception:
                log.exception("%s: supervisor callback failed", self.name)

    def _reject_queued(self) -> None:
        for _, reply, _ in self._mailbox.drain():
            if reply is not None and not reply.done():
                reply.set_exception(MailboxClosed(f"{self.name} stopped"))
