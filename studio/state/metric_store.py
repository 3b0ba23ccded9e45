"""Qt-free, append-only store of metric series for the Training dashboard.

Every run has one series per metric key (``rollout/ep_rew_mean``,
``train/value_loss``, ...). A series is three preallocated float64 numpy
buffers (step, wall time in seconds, value) that grow by doubling, so an append
costs amortized O(1) and no per-row Python objects are kept. Views get numpy
slices of those buffers (no copies) and redraw only what changed, using either
listeners or the version clock (:meth:`MetricStore.changed_since`).

The store is not thread-safe: call it from one thread (the GUI thread).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: ``listener(run_id, keys)``: new metric keys appeared in a run.
KeysListener = Callable[[str, list[str]], None]
#: ``listener(run_id, keys)``: values were appended to these keys of a run.
AppendListener = Callable[[str, list[str]], None]
#: ``listener(run_id)``: a run and all its series were removed.
RunListener = Callable[[str], None]

Series = tuple[np.ndarray, np.ndarray, np.ndarray]

_RESERVED = ("step", "time")
_MIN_CAPACITY = 64
_EMPTY = np.empty(0, dtype=np.float64)
_EMPTY.flags.writeable = False


class _Buffer:
    """Three growing float64 buffers of equal length for one (run, key)."""

    __slots__ = ("_data", "n", "version")

    def __init__(self) -> None:
        # One (3, capacity) block: row 0 steps, row 1 times, row 2 values.
        self._data = np.empty((3, _MIN_CAPACITY), dtype=np.float64)
        self.n = 0
        self.version = 0

    def extend(self, steps: np.ndarray, times: np.ndarray, values: np.ndarray) -> None:
        m = len(values)
        need = self.n + m
        cap = self._data.shape[1]
        if need > cap:
            # Doubling keeps appends amortized O(1); the extra quarter leaves room
            # after a bulk load so live rows do not trigger a copy right away.
            new_cap = max(need + need // 4, 2 * cap)
            grown = np.empty((3, new_cap), dtype=np.float64)
            grown[:, : self.n] = self._data[:, : self.n]
            self._data = grown
        end = self.n + m
        self._data[0, self.n : end] = steps
        self._data[1, self.n : end] = times
        self._data[2, self.n : end] = values
        self.n = end

    def view(self) -> Series:
        d = self._data
        n = self.n
        return d[0, :n], d[1, :n], d[2, :n]

    @property
    def capacity(self) -> int:
        return int(self._data.shape[1])


class _Run:
    __slots__ = ("last_time", "series")

    def __init__(self) -> None:
        self.series: dict[str, _Buffer] = {}
        self.last_time = 0.0


class MetricStore:
    """Metric series per run and key, in growing numpy buffers.

    Rows look like ``{"step": 2048, "time": 3.1, "rollout/ep_rew_mean": 21.5}``
    with ``time`` in seconds since the run started. Values that are not finite
    numbers are dropped; a row without a numeric ``step`` is ignored.
    """

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._clock = 0
        self._keys_listeners: list[KeysListener] = []
        self._append_listeners: list[AppendListener] = []
        self._removed_listeners: list[RunListener] = []

    # ------------------------------------------------------------------ queries
    def runs(self) -> list[str]:
        return list(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def keys(self, run_id: str) -> list[str]:
        """Metric keys of a run in the order they first appeared ([] if unknown)."""
        run = self._runs.get(run_id)
        return list(run.series) if run else []

    def series(self, run_id: str, key: str) -> Series:
        """``(steps, times, values)`` as views of the buffers (no copy).

        The views stay valid (they never change) but go stale after the next
        append; fetch again after a change. Unknown run or key: empty arrays.
        """
        buf = self._buffer(run_id, key)
        if buf is None:
            return _EMPTY, _EMPTY, _EMPTY
        return buf.view()

    def length(self, run_id: str, key: str) -> int:
        buf = self._buffer(run_id, key)
        return buf.n if buf else 0

    def last(self, run_id: str, key: str) -> tuple[float, float, float] | None:
        """The last ``(step, time, value)`` of a series, or None when empty."""
        buf = self._buffer(run_id, key)
        if buf is None or buf.n == 0:
            return None
        steps, times, values = buf.view()
        return float(steps[-1]), float(times[-1]), float(values[-1])

    def version(self, run_id: str, key: str) -> int:
        """Clock value of the last change to a series (0 if it does not exist)."""
        buf = self._buffer(run_id, key)
        return buf.version if buf else 0

    @property
    def token(self) -> int:
        """The current version clock; pass it to :meth:`changed_since` later."""
        return self._clock

    def changed_since(self, token: int) -> tuple[list[tuple[str, str]], int]:
        """``((run_id, key) pairs changed after token, new token)``."""
        changed = [
            (run_id, key)
            for run_id, run in self._runs.items()
            for key, buf in run.series.items()
            if buf.version > token
        ]
        return changed, self._clock

    # ------------------------------------------------------------------ updates
    def append_rows(self, run_id: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Append metric rows to a run; return how many values were stored."""
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        cols: dict[str, tuple[list[float], list[float], list[float]]] = {}
        last_time = run.last_time
        for row in rows:
            step = row.get("step")
            if isinstance(step, bool) or not isinstance(step, int | float):
                continue
            t = row.get("time")
            if (
                isinstance(t, int | float)
                and not isinstance(t, bool)
                and math.isfinite(t)
            ):
                last_time = float(t)
            for key, value in row.items():
                if key in _RESERVED:
                    continue
                if isinstance(value, bool):
                    value = float(value)
                elif not isinstance(value, int | float):
                    continue
                if not math.isfinite(value):
                    continue
                col = cols.get(key)
                if col is None:
                    col = cols[key] = ([], [], [])
                col[0].append(step)
                col[1].append(last_time)
                col[2].append(value)
        run.last_time = last_time
        stored = 0
        for key, (s, t_, v) in cols.items():
            stored += len(v)
            self._extend(run, key, np.asarray(s, float), np.asarray(t_, float), v)
        self._announce(run_id, run, list(cols))
        return stored

    def append_arrays(
        self,
        run_id: str,
        key: str,
        steps: np.ndarray,
        times: np.ndarray,
        values: np.ndarray,
    ) -> None:
        """Append many values of one key at once (arrays of equal length)."""
        if not (len(steps) == len(times) == len(values)):
            raise ValueError("steps, times and values must have the same length.")
        if key in _RESERVED:
            raise ValueError(f"'{key}' is reserved and cannot be a metric key.")
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        self._extend(run, key, steps, times, values)
        if len(times):
            run.last_time = float(np.asarray(times)[-1])
        self._announce(run_id, run, [key])

    def load_jsonl(
        self, run_id: str, path: str | Path, *, replace: bool = False
    ) -> int:
        """Bulk-load a ``metrics.jsonl``; return the number of rows read.

        A torn last line (no newline: the writer crashed mid-line) is skipped.
        Uses pyarrow's multi-threaded JSON reader when it is installed and
        falls back to a line-by-line reader (which also skips corrupt lines).
        A missing file loads nothing. With ``replace`` the run is cleared first.
        """
        if replace and run_id in self._runs:
            self.remove_run(run_id)
        p = Path(path)
        if not p.exists():
            return 0
        data = p.read_bytes()
        end = data.rfind(b"\n") + 1
        if end == 0:
            return 0
        try:
            columns, n_rows = _read_columns_arrow(memoryview(data)[:end])
        except Exception:  # pyarrow missing or a line it cannot read
            return self._load_lines(run_id, data[:end])
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        if n_rows == 0 or "step" not in columns:
            return n_rows
        steps = columns.pop("step")
        step_ok = np.isfinite(steps)
        times = columns.pop("time", None)
        times = _forward_fill(times, run.last_time, n_rows)
        for key, values in columns.items():
            mask = step_ok & np.isfinite(values)
            if not mask.any():
                continue
            self._extend(run, key, steps[mask], times[mask], values[mask])
        ok_times = times[step_ok]
        if len(ok_times):
            run.last_time = float(ok_times[-1])
        self._announce(run_id, run, list(columns))
        return n_rows

    def remove_run(self, run_id: str) -> None:
        """Forget a run and all its series (no-op when unknown)."""
        if self._runs.pop(run_id, None) is None:
            return
        self._clock += 1
        for listener in list(self._removed_listeners):
            listener(run_id)

    def clear(self) -> None:
        for run_id in list(self._runs):
            self.remove_run(run_id)

    # ---------------------------------------------------------------- listeners
    def add_keys_listener(self, listener: KeysListener) -> Callable[[], None]:
        """Call ``listener(run_id, new_keys)`` when keys first appear.

        Returns a function that unsubscribes it.
        """
        return _subscribe(self._keys_listeners, listener)

    def add_append_listener(self, listener: AppendListener) -> Callable[[], None]:
        """Call ``listener(run_id, keys)`` after values were appended."""
        return _subscribe(self._append_listeners, listener)

    def add_run_removed_listener(self, listener: RunListener) -> Callable[[], None]:
        return _subscribe(self._removed_listeners, listener)

    # ------------------------------------------------------------------ helpers
    def _buffer(self, run_id: str, key: str) -> _Buffer | None:
        run = self._runs.get(run_id)
        return run.series.get(key) if run else None

    def _extend(self, run: _Run, key: str, steps: Any, times: Any, values: Any) -> None:
        buf = run.series.get(key)
        if buf is None:
            buf = run.series[key] = _Buffer()
            buf.version = -1  # marks "new" for _announce
        buf.extend(steps, times, values)

    def _announce(self, run_id: str, run: _Run, keys: list[str]) -> None:
        if not keys:
            return
        self._clock += 1
        new_keys = []
        for key in keys:
            buf = run.series.get(key)
            if buf is None:
                continue
            if buf.version == -1:
                new_keys.append(key)
            buf.version = self._clock
        if new_keys:
            for listener in list(self._keys_listeners):
                listener(run_id, new_keys)
        for listener in list(self._append_listeners):
            listener(run_id, list(keys))

    def _load_lines(self, run_id: str, data: bytes) -> int:
        batch: list[dict[str, Any]] = []
        n_rows = 0
        for line in data.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            batch.append(row)
            n_rows += 1
            if len(batch) >= 50_000:
                self.append_rows(run_id, batch)
                batch = []
        self.append_rows(run_id, batch)
        return n_rows


def _subscribe(listeners: list[Any], listener: Any) -> Callable[[], None]:
    listeners.append(listener)

    def unsubscribe() -> None:
        if listener in listeners:
            listeners.remove(listener)

    return unsubscribe


def _read_columns_arrow(data: memoryview) -> tuple[dict[str, np.ndarray], int]:
    """Numeric columns of a JSON Lines buffer as float64 arrays (NaN = absent)."""
    import pyarrow as pa
    import pyarrow.json as pj

    table = pj.read_json(
        pa.BufferReader(pa.py_buffer(data)),
        read_options=pj.ReadOptions(block_size=8 << 20),
    )
    columns: dict[str, np.ndarray] = {}
    for name in table.column_names:
        col = table.column(name)
        t = col.type
        if not (
            pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
        ):
            continue
        if not pa.types.is_floating(t):
            col = col.cast(pa.float64())
        arr = col.to_numpy(zero_copy_only=False)
        columns[name] = np.asarray(arr, dtype=np.float64)
    return columns, table.num_rows


def _forward_fill(times: np.ndarray | None, start: float, n: int) -> np.ndarray:
    """Wall times with gaps filled by the previous known time (``start`` first)."""
    if times is None:
        return np.full(n, start, dtype=np.float64)
    ok = np.isfinite(times)
    if ok.all():
        return times
    idx = np.where(ok, np.arange(n), -1)
    np.maximum.accumulate(idx, out=idx)
    filled = np.where(idx >= 0, times[np.maximum(idx, 0)], start)
    return filled.astype(np.float64)
