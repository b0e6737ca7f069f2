"""The one lifecycle every long-lived part of the job follows.

A *component* (the metrics server, the lag poller, the lag renderer's thread, the assignor
advisor's thread, the topic-name service, the streaming query) is

1. **configured** by its constructor: it takes its settings and collaborators and does no
   I/O (no socket, no file, no thread), so building the whole job is cheap and cannot fail
   half-way;
2. **started** by :meth:`Component.start`: it opens what it needs and starts its threads; if
   it raises, it holds nothing;
3. **stopped** by :meth:`Component.stop`: it releases everything, waits for its threads
   within its own bound, and may be called more than once (or without a start).

:class:`Lifecycle` starts components in order and stops them in the reverse order, so each
one starts after, and stops before, whatever it reads from. A start that fails stops the
components already started, newest first, and re-raises; a stop that fails is logged and
the rest are stopped all the same.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Protocol

log = logging.getLogger(__name__)


class Component(Protocol):
    """A long-lived part of the job (see the module docstring)."""

    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Lifecycle:
    """Components started in order and stopped in reverse (see the module docstring)."""

    def __init__(self, components: Iterable[Component] = ()) -> None:
        self._components = list(components)
        self._started: list[Component] = []

    def add(self, component: Component) -> None:
        """Append ``component``: it starts after, and stops before, every one added earlier."""
        self._components.append(component)

    def start(self) -> None:
        for component in self._components:
            if component in self._started:
                continue
            try:
                component.start()
            except BaseException:
                log.error("%s failed to start; stopping what started before it", component.name)
                self.stop()
                raise
            self._started.append(component)

    def stop(self) -> None:
        while self._started:
            component = self._started.pop()
            try:
                component.stop()
            except Exception:
                log.exception("%s failed to stop", component.name)

    @property
    def started(self) -> list[str]:
        return [c.name for c in self._started]


class PollingThread:
    """A component whose work is one daemon thread looping until :meth:`stop`: subclasses write the
    loop (:meth:`_run`, which returns once ``self._stopping`` is set) and what releases their clients
    (:meth:`_close`, run on the thread's way out, or by :meth:`stop` when no thread runs)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the current round; the clients are closed on the way out."""
        self._stopping.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout_s)
        else:
            self._close()  # a round may have run on the caller's thread without the loop

    def _loop(self) -> None:
        try:
            self._run()
        finally:
            self._close()

    def _run(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        """Release the clients (nothing by default)."""
