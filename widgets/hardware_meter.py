"""Compact CPU / RAM / GPU gauges for a status bar."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget


@dataclass(frozen=True)
class Usage:
    cpu_percent: float
    ram_used_bytes: int
    ram_total_bytes: int
    gpu_name: str = ""
    gpu_memory_used_bytes: int | None = None
    gpu_memory_total_bytes: int | None = None
    gpu_util_percent: float | None = None


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f}"


class _Gauge(QWidget):
    def __init__(self, title: str) -> None:
        super().__init__()
        self.title = QLabel(title)
        self.bar = QProgressBar(textVisible=False)
        self.bar.setMaximumSize(70, 14)
        self.bar.setRange(0, 100)
        self.value = QLabel()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.setSpacing(4)
        layout.addWidget(self.title)
        layout.addWidget(self.bar)
        layout.addWidget(self.value)

    def set(self, percent: float, text: str, tooltip: str) -> None:
        self.bar.setValue(round(max(0.0, min(100.0, percent))))
        self.value.setText(text)
        self.setToolTip(tooltip)


class HardwareMeter(QWidget):
    """Call ``set_usage(Usage(...))`` on a timer.

    CPU and RAM always show; a GPU adds two gauges once it is known: its
    utilisation (``GPU``, n/a while unknown) and its memory (``VRAM``).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.cpu = _Gauge("CPU")
        self.ram = _Gauge("RAM")
        self.gpu = _Gauge("GPU")
        self.vram = _Gauge("VRAM")
        self.gpu.hide()
        self.vram.hide()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for gauge in (self.cpu, self.ram, self.gpu, self.vram):
            layout.addWidget(gauge)

    def set_usage(self, usage: Usage) -> None:
        self.cpu.set(usage.cpu_percent, f"{usage.cpu_percent:.0f}%", "CPU utilisation")
        ram_pct = 100.0 * usage.ram_used_bytes / max(usage.ram_total_bytes, 1)
        self.ram.set(
            ram_pct,
            f"{_gib(usage.ram_used_bytes)}/{_gib(usage.ram_total_bytes)} GiB",
            "Memory in use",
        )
        if not usage.gpu_name:
            self.gpu.hide()
            self.vram.hide()
            return
        util = usage.gpu_util_percent
        self.gpu.set(
            util or 0.0,
            "n/a" if util is None else f"{util:.0f}%",
            f"{usage.gpu_name}: utilisation"
            + ("" if util is not None else " (not reported)"),
        )
        self.gpu.show()
        total = usage.gpu_memory_total_bytes or 0
        used = usage.gpu_memory_used_bytes
        if not total:
            self.vram.hide()
            return
        if used is None:
            self.vram.set(0.0, f"{_gib(total)} GiB", f"{usage.gpu_name}: memory")
        else:
            self.vram.set(
                100.0 * used / total,
                f"{_gib(used)}/{_gib(total)} GiB",
                f"{usage.gpu_name}: memory in use",
            )
        self.vram.show()
