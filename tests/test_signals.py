"""PySide6 6.12.0 aborts after a few thousand emits on Python 3.11 (`bool_dealloc`);
the pin keeps us below it and this test proves the installed one is sound."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class _Emitter(QObject):
    changed = Signal(int)
    flagged = Signal(bool)


def test_200000_signal_emits_do_not_crash(qapp) -> None:
    emitter = _Emitter()
    received = []
    emitter.changed.connect(lambda v: received.append(v))
    seen_bools = [0]
    emitter.flagged.connect(lambda b: seen_bools.__setitem__(0, seen_bools[0] + int(b)))
    for i in range(100_000):
        emitter.changed.emit(i)
        emitter.flagged.emit(True)
    assert len(received) == 100_000
    assert received[-1] == 99_999
    assert seen_bools[0] == 100_000
