"""A minimal change-notification mixin for Qt-free models.

Views subscribe with ``subscribe(callback)``; the model calls
``notify(what, key)`` after each change. ``what`` names the kind of change
(``"reset"``, ``"run"``, ...) and ``key`` the item, so a view can update one
row instead of rebuilding everything.
"""

from __future__ import annotations

from collections.abc import Callable

Listener = Callable[[str, str], None]


class Observable:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener; returns a function that removes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def notify(self, what: str, key: str = "") -> None:
        for listener in list(self._listeners):
            listener(what, key)
