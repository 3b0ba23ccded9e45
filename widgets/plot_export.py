"""A live plot panel's exports: its curves as CSV, its plots as PNG. Used
by ``widgets.live_plot``."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from PySide6 import QtWidgets

from widgets.plot_group import PlotGroup


def write_csv(
    path: str | Path,
    groups: Iterable[PlotGroup],
    labels: dict[str, str],
    *,
    x_axis: str,
    smoothed: bool,
    visible_range_only: bool = False,
) -> int:
    """Write the curves of ``groups`` as CSV; return the number of rows.

    Columns: ``run`` (its label in ``labels``), ``key``, ``step``, ``time``,
    ``value`` and, when ``smoothed``, ``smoothed``. With
    ``visible_range_only`` only points inside each plot's current range on
    the ``x_axis`` are written.
    """
    header = ["run", "key", "step", "time", "value"] + (
        ["smoothed"] if smoothed else []
    )
    rows = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for group in groups:
            lo, hi = (
                group.view.viewRange()[0]
                if visible_range_only
                else (-math.inf, math.inf)
            )
            for curve in group.curves:
                n = len(curve.values)
                i0, i1 = 0, n
                if visible_range_only:
                    x = curve.x(x_axis)
                    i0 = int(np.searchsorted(x, lo, "left"))
                    i1 = int(np.searchsorted(x, hi, "right"))
                cols = [
                    curve.steps[i0:i1].tolist(),
                    curve.times[i0:i1].tolist(),
                    curve.values[i0:i1].tolist(),
                ]
                if smoothed:
                    cols.append(curve.display_y()[i0:i1].tolist())
                label = labels[curve.run_id]
                for vals in zip(*cols, strict=True):
                    writer.writerow(
                        (
                            label,
                            curve.key,
                            f"{vals[0]:.0f}",
                            *(repr(v) for v in vals[1:]),
                        )
                    )
                rows += i1 - i0
    return rows


def save_png(widget: QtWidgets.QWidget, path: str | Path) -> Path:
    """Save what ``widget`` shows as a PNG image."""
    path = Path(path)
    if not widget.grab().save(str(path), "PNG"):
        raise OSError(f"Could not write the image to {path}.")
    return path


def ask_export_path(parent: QtWidgets.QWidget, kind: str) -> str:
    """A file name for an export of ``kind`` (``"png"`` or ``"csv"``) from a
    dialog; empty when the user cancelled."""
    if kind not in ("png", "csv"):
        raise ValueError(f"export kind must be 'png' or 'csv', not {kind!r}.")
    filt = "PNG image (*.png)" if kind == "png" else "CSV file (*.csv)"
    name, _ = QtWidgets.QFileDialog.getSaveFileName(
        parent, "Export plots", f"metrics.{kind}", filt
    )
    return name


__all__ = ["ask_export_path", "save_png", "write_csv"]
