"""The bar over a live plot panel: smoothing, the x axis, and export. Used
by ``widgets.live_plot``."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

X_AXES = ("step", "time")
"""The x axis modes: steps, or wall time in seconds since the run started."""


class PlotToolbar(QtWidgets.QWidget):
    """It says what the user set; the panel applies it and shows it back
    (:meth:`show_smoothing`, :meth:`show_x_axis`, which signal nothing)."""

    smoothing_edited = QtCore.Signal(float)
    """The user set the EMA weight (0 to 0.99)."""
    x_axis_edited = QtCore.Signal(str)
    """The user chose an x axis (``"step"`` or ``"time"``)."""
    export_requested = QtCore.Signal(str)
    """``"png"`` or ``"csv"``."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.smooth_slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.smooth_slider.setRange(0, 99)
        # 80 to 160 px: fixed at 160, it kept the runs list beside the
        # charts at 218 px of a 1024 px screen
        self.smooth_slider.setMinimumWidth(80)
        self.smooth_slider.setMaximumWidth(160)
        self.smooth_slider.setToolTip("Exponential moving average, as in TensorBoard")
        self.smooth_value = QtWidgets.QLabel("0.00")
        self.smooth_value.setMinimumWidth(32)
        self.smooth_slider.valueChanged.connect(self._on_smooth_slider_value_changed)
        self.x_combo = QtWidgets.QComboBox()
        self.x_combo.addItem("Steps", "step")
        self.x_combo.addItem("Wall time", "time")
        self.x_combo.currentIndexChanged.connect(self._on_x_combo_index_changed)
        self.png_button = QtWidgets.QPushButton("Export PNG")
        self.png_button.clicked.connect(lambda: self.export_requested.emit("png"))
        self.csv_button = QtWidgets.QPushButton("Export CSV")
        self.csv_button.clicked.connect(lambda: self.export_requested.emit("csv"))
        bar = QtWidgets.QHBoxLayout(self)
        bar.setContentsMargins(4, 2, 4, 2)
        bar.addWidget(QtWidgets.QLabel("Smoothing"))
        bar.addWidget(self.smooth_slider, 1)
        bar.addWidget(self.smooth_value)
        bar.addSpacing(16)
        bar.addWidget(QtWidgets.QLabel("X axis"))
        bar.addWidget(self.x_combo)
        bar.addStretch(1)
        bar.addWidget(self.png_button)
        bar.addWidget(self.csv_button)

    def show_smoothing(self, weight: float) -> None:
        with QtCore.QSignalBlocker(self.smooth_slider):
            self.smooth_slider.setValue(round(weight * 100))
        self.smooth_value.setText(f"{weight:.2f}")

    def show_x_axis(self, mode: str) -> None:
        with QtCore.QSignalBlocker(self.x_combo):
            self.x_combo.setCurrentIndex(X_AXES.index(mode))

    def _on_smooth_slider_value_changed(self, value: int) -> None:
        self.smoothing_edited.emit(value / 100.0)

    def _on_x_combo_index_changed(self, index: int) -> None:
        self.x_axis_edited.emit(self.x_combo.itemData(index))


__all__ = ["X_AXES", "PlotToolbar"]
