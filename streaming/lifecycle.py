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
