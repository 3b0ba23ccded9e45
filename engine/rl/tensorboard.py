"""TensorBoard event files written without slowing training down.

An event file is a sequence of TFRecords (length, masked CRC-32C of the
length, the serialized ``Event``, masked CRC-32C of the event). tensorboard's
own writer computes the CRC in pure Python, byte by byte, on a background
thread that holds the GIL: about 0.6 % of PPO's CartPole throughput for the
few kilobytes SB3 logs. Here the CRC is a table look-up per byte position
done by numpy (CRC-32C is linear over GF(2), so the register after a message
is the XOR of each byte's contribution at its distance from the end): a few
microseconds per event, and done on a writer thread so that the training
thread only queues the values. The writer wakes once a second and writes
what was queued since: waking for every dump (14 a second in PPO on
CartPole) cost the training thread a GIL hand-over and the writer cold
caches each time.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected
_MAX_TABLE_BYTES = 4096
"""Messages up to this long use the position table (grown on demand to the
longest message seen, 1 KiB per byte position); longer ones fall back to
tensorboard's byte loop."""


class _Tables:
    """``contrib[k, b]``: the register contribution of byte ``b`` followed by
    ``k`` more bytes; ``init[n]``: the initial register 0xFFFFFFFF after ``n``
    zero bytes."""

    def __init__(self) -> None:
        table = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1)
        self.byte = table.astype(np.uint32)
        self.contrib = np.empty((0, 256), dtype=np.uint32)
        self.init = np.full(1, 0xFFFFFFFF, dtype=np.uint32)

    def ensure(self, n: int) -> None:
        have = len(self.contrib)
        if n <= have:
            return
        size = max(n, 2 * have, 256)
        contrib = np.empty((size, 256), dtype=np.uint32)
        init = np.empty(size + 1, dtype=np.uint32)
        contrib[:have], init[: have + 1] = self.contrib, self.init
        row = self.byte if have == 0 else self._next(self.contrib[-1])
        reg = self.init[have]
        for k in range(have, size):
            contrib[k] = row
            row = self._next(row)
            reg = self._next(reg)
            init[k + 1] = reg
        self.contrib, self.init = contrib, init

    def _next(self, register: Any) -> Any:
        """The register(s) after one more zero byte."""
        return (register >> np.uint32(8)) ^ self.byte[register & 0xFF]


_tables: list[_Tables] = []


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (as in TFRecords, iSCSI, ext4)."""
    n = len(data)
    if n > _MAX_TABLE_BYTES:
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import (
            crc32c as slow_crc32c,
        )

        return int(slow_crc32c(data))
    if not _tables:
        _tables.append(_Tables())
    tables = _tables[0]
    tables.ensure(n)
    register = int(tables.init[n])
    if n:
        positions = np.arange(n - 1, -1, -1)
        values = tables.contrib[positions, np.frombuffer(data, np.uint8)]
        register ^= int(np.bitwise_xor.reduce(values))
    return register ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC TFRecords store: rotated and offset, so that CRCs of CRCs do
    not collide."""
    x = crc32c(data)
    return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class EventFile:
    """One ``events.out.tfevents.*`` file in ``folder``.

    ``scalars`` only queues the values: a writer thread wakes every
    ``FLUSH_S`` seconds (TensorBoard reloads every 30 s), builds the events
    queued since, computes their CRCs, writes and flushes them, while the
    training thread goes on; ``close`` writes what is left. A write error (a
    full disk) ends the TensorBoard file, never the training; ``error`` keeps
    it.
    """

    FLUSH_S = 1.0

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}."
            f"{socket.gethostname()}.{os.getpid()}.0"
        )
        self.path = folder / name
        self.error: OSError | None = None
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        from tensorboard.compat.proto.event_pb2 import Event

        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        self._queue: queue.SimpleQueue[tuple[float, int, dict[str, float]]]
        self._queue = queue.SimpleQueue()
        self._closing = threading.Event()
        self._writer = threading.Thread(
            target=self._write_loop, name="tensorboard-events", daemon=True
        )
        self._writer.start()

    def scalars(self, step: int, values: dict[str, float]) -> None:
        """Queue one event holding ``values`` at ``step``."""
        self._queue.put((time.time(), int(step), values))

    def close(self) -> None:
        """Write what is queued, then close the file."""
        self._closing.set()
        self._writer.join()
        with contextlib.suppress(OSError):
            self._fh.close()

    def _write_loop(self) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        closing = False
        while not closing:
            closing = self._closing.wait(self.FLUSH_S)
            wrote = False
            while not self._queue.empty():
                wall_time, step, values = self._queue.get()
                if self.error is not None:
                    continue
                summary = Summary(
                    value=[
                        Summary.Value(tag=k, simple_value=v) for k, v in values.items()
                    ]
                )
                event = Event(wall_time=wall_time, step=step, summary=summary)
                try:
                    self._write(event)
                except OSError as exc:
                    self.error = exc
                wrote = True
            if wrote and self.error is None:
                try:
                    self._fh.flush()
                except OSError as exc:
                    self.error = exc

    def _write(self, event: Any) -> None:
        data = event.SerializeToString()
        header = len(data).to_bytes(8, "little")
        self._fh.write(
            header
            + masked_crc32c(header).to_bytes(4, "little")
            + data
            + masked_crc32c(data).to_bytes(4, "little")
        )
