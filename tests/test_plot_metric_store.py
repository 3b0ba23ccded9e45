"""MetricStore: append-only numpy series per run and key (no Qt)."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import numpy as np
import pytest

from studio.state.metric_store import MetricStore

ROOT = Path(__file__).resolve().parents[1]


def test_metric_store_module_imports_no_qt() -> None:
    tree = ast.parse((ROOT / "studio/state/metric_store.py").read_text())
    names = [
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    ]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in names if "Qt" in m or "pyqtgraph" in m or "PySide" in m]


def test_append_rows_splits_keys_and_keeps_step_time() -> None:
    store = MetricStore()
    stored = store.append_rows(
        "r1",
        [
            {"step": 10, "time": 1.0, "rollout/ep_rew_mean": 5.0, "time/fps": 100},
            {"step": 20, "time": 2.0, "train/value_loss": 0.5},
            {"step": 30, "time": 3.0, "rollout/ep_rew_mean": 7.5},
        ],
    )
    assert stored == 4
    assert store.keys("r1") == ["rollout/ep_rew_mean", "time/fps", "train/value_loss"]
    steps, times, values = store.series("r1", "rollout/ep_rew_mean")
    assert steps.tolist() == [10.0, 30.0]
    assert times.tolist() == [1.0, 3.0]
    assert values.tolist() == [5.0, 7.5]
    assert steps.dtype == times.dtype == values.dtype == np.float64
    assert store.last("r1", "train/value_loss") == (20.0, 2.0, 0.5)


def test_bad_values_and_rows_are_dropped() -> None:
    store = MetricStore()
    store.append_rows(
        "r",
        [
            {"time": 1.0, "a": 1.0},  # no step
            {"step": "x", "a": 1.0},  # step not a number
            {"step": 1, "a": float("nan"), "b": float("inf"), "c": "text", "d": None},
            {"step": 2, "a": 2.0, "flag": True},
        ],
    )
    assert store.keys("r") == ["a", "flag"]
    assert store.series("r", "a")[2].tolist() == [2.0]
    assert store.series("r", "flag")[2].tolist() == [1.0]
    # A row without time takes the run's last known time.
    assert store.series("r", "a")[1].tolist() == [0.0]


def test_series_are_views_not_copies_and_buffers_grow_by_doubling() -> None:
    store = MetricStore()
    store.append_rows("r", [{"step": i, "time": i, "v": i} for i in range(10)])
    steps, _, values = store.series("r", "v")
    assert not values.flags.owndata and values.base is not None
    assert np.shares_memory(steps, store.series("r", "v")[0])
    buf = store._runs["r"].series["v"]
    capacities = set()
    for i in range(10, 5000):
        store.append_rows("r", [{"step": i, "time": i, "v": i}])
        capacities.add(buf.capacity)
    # Amortized doubling: a handful of reallocations for 5,000 single appends.
    assert len(capacities) <= 8
    assert store.series("r", "v")[2].tolist() == list(range(5000))
    # An old view is stale but still valid: its data never changed.
    assert values.tolist() == list(range(10))


def test_unknown_run_or_key_gives_empty_series() -> None:
    store = MetricStore()
    for arr in store.series("nope", "x"):
        assert arr.shape == (0,)
    assert store.keys("nope") == []
    assert store.last("nope", "x") is None
    assert store.length("nope", "x") == 0


def test_versions_and_changed_since_report_only_what_changed() -> None:
    store = MetricStore()
    t0 = store.token
    store.append_rows("a", [{"step": 1, "x": 1.0, "y": 2.0}])
    store.append_rows("b", [{"step": 1, "x": 1.0}])
    changed, t1 = store.changed_since(t0)
    assert sorted(changed) == [("a", "x"), ("a", "y"), ("b", "x")]
    store.append_rows("a", [{"step": 2, "y": 3.0}])
    changed, t2 = store.changed_since(t1)
    assert changed == [("a", "y")]
    assert store.version("a", "y") > store.version("a", "x")
    assert store.changed_since(t2) == ([], t2)


def test_listeners_for_new_keys_appends_and_removal() -> None:
    store = MetricStore()
    new_keys: list[tuple[str, list[str]]] = []
    appended: list[tuple[str, list[str]]] = []
    removed: list[str] = []
    unsubscribe = store.add_keys_listener(lambda r, k: new_keys.append((r, k)))
    store.add_append_listener(lambda r, k: appended.append((r, k)))
    store.add_run_removed_listener(removed.append)
    store.append_rows("r", [{"step": 1, "a": 1.0}])
    store.append_rows("r", [{"step": 2, "a": 2.0, "b": 1.0}])
    assert new_keys == [("r", ["a"]), ("r", ["b"])]
    assert appended == [("r", ["a"]), ("r", ["a", "b"])]
    unsubscribe()
    store.append_rows("r", [{"step": 3, "c": 1.0}])
    assert len(new_keys) == 2
    store.remove_run("r")
    assert removed == ["r"] and "r" not in store
    store.remove_run("r")  # no-op
    assert removed == ["r"]


def test_append_arrays_checks_lengths() -> None:
    store = MetricStore()
    with pytest.raises(ValueError, match="same length"):
        store.append_arrays("r", "k", np.zeros(3), np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="reserved"):
        store.append_arrays("r", "step", np.zeros(1), np.zeros(1), np.zeros(1))


def _write_rows(path: Path, rows: list[dict[str, object]], torn: str = "") -> None:
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    path.write_text(text + torn, encoding="utf-8")


@pytest.mark.parametrize("use_arrow", [True, False])
def test_load_jsonl_skips_torn_last_line(
    tmp_path: Path, use_arrow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not use_arrow:
        import studio.state.metric_store as ms

        def no_arrow(data: memoryview) -> None:
            raise ImportError("pyarrow not installed")

        monkeypatch.setattr(ms, "_read_columns_arrow", no_arrow)
    rows = [
        {
            "step": i * 8,
            "time": i * 0.5,
            "rollout/ep_rew_mean": float(i),
            "time/fps": 100,
        }
        for i in range(100)
    ]
    rows[50]["train/value_loss"] = 0.25
    path = tmp_path / "metrics.jsonl"
    _write_rows(path, rows, torn='{"step":800,"time":40.0,"rollout/ep_rew')
    store = MetricStore()
    assert store.load_jsonl("r", path) == 100
    steps, times, values = store.series("r", "rollout/ep_rew_mean")
    assert len(values) == 100
    assert steps[-1] == 99 * 8 and times[-1] == 49.5 and values[-1] == 99.0
    assert store.series("r", "train/value_loss")[0].tolist() == [400.0]
    assert store.series("r", "time/fps")[2].dtype == np.float64
    # Loading again appends after what is there; replace=True starts over.
    assert store.load_jsonl("r", path, replace=True) == 100
    assert store.length("r", "rollout/ep_rew_mean") == 100


def test_load_jsonl_with_a_corrupt_middle_line_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step":1,"time":0.1,"a":1}\nnot json\n{"step":2,"time":0.2,"a":2}\n'
    )
    store = MetricStore()
    assert store.load_jsonl("r", path) == 2
    assert store.series("r", "a")[2].tolist() == [1.0, 2.0]
    assert store.load_jsonl("r", tmp_path / "missing.jsonl") == 0


def test_load_jsonl_one_million_rows_in_a_few_seconds(tmp_path: Path) -> None:
    n = 1_000_000
    path = tmp_path / "metrics.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(
            f'{{"step":{i * 8},"time":{i * 0.01:.2f},'
            f'"rollout/ep_rew_mean":{i % 500 + 0.5},"time/fps":{i % 900}}}\n'
            for i in range(n)
        )
        fh.write('{"step":')  # torn last line
    store = MetricStore()
    t0 = time.perf_counter()
    assert store.load_jsonl("big", path) == n
    elapsed = time.perf_counter() - t0
    steps, _, values = store.series("big", "rollout/ep_rew_mean")
    assert (
        len(values) == n
        and steps[-1] == (n - 1) * 8
        and values[-1] == (n - 1) % 500 + 0.5
    )
    assert store.length("big", "time/fps") == n
    assert elapsed < 15.0, f"loading 1,000,000 rows took {elapsed:.1f} s"
