"""Callbacks that never call into deleted Qt objects.

A reply from the engine, an event or a model notification can arrive after
the widget that asked for it was closed and deleted (a dialog with
``WA_DeleteOnClose``); calling into it then raises ``RuntimeError: Internal
C++ object already deleted``. Pending work is therefore tied to the object
that asked (its *owner*) and dropped when the owner is gone:

* :func:`owner_of` finds the owner of a callback (the ``QObject`` a bound
  method belongs to), so callers rarely name it;
* :func:`is_alive` says whether the C++ side of an owner still exists;
* :func:`subscribe` subscribes an owner to a Qt-free ``Observable`` model
  and unsubscribes it when the owner is destroyed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject

from studio.state.observable import Listener, Observable


def owner_of(*callbacks: Callable[..., Any] | None) -> QObject | None:
    """The first ``QObject`` that one of ``callbacks`` is a bound method of."""
    for callback in callbacks:
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, QObject):
            return owner
    return None


def is_alive(owner: QObject | None) -> bool:
    """False once the C++ object behind ``owner`` was deleted; True for None
    (work nobody owns is never dropped)."""
    return owner is None or shiboken6.isValid(owner)


def subscribe(model: Observable, owner: QObject, listener: Listener) -> None:
    """``model.subscribe(listener)`` for as long as ``owner`` lives."""

    def guarded(what: str, key: str) -> None:
        if is_alive(owner):
            listener(what, key)
        else:
            unsubscribe()

    unsubscribe = model.subscribe(guarded)
    owner.destroyed.connect(lambda *_: unsubscribe())


def guard(callback: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``callback``, called only while the QObject it is a bound method of
    lives (a callback that belongs to no QObject is returned as it is)."""
    owner = owner_of(callback)
    if callback is None or owner is None:
        return callback

    def call(*args: Any) -> None:
        if is_alive(owner):
            callback(*args)

    return call
