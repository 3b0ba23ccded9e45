"""The Models workspace's Details tab: the selected model's lineage as a
chain (asked of the engine, drawn from the state until it answers) and its
details (metrics, the policy read from the zip, the Ollama details)."""

from __future__ import annotations

import functools
import html
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from studio.common import fmt_bytes, fmt_time
from studio.model_manager.controller import ModelsController
from studio.model_manager.run_results import short
from studio.state.model_catalog import (
    KIND_LABELS,
    OLLAMA_PREFIX,
    ChainNode,
    lineage_chain,
    ollama_ref,
    on_server,
    server_status,
)
from studio.state.project_state import ProjectState
from widgets.chain_view import ChainItem, ChainView


def _row(label: str, value: Any) -> str:
    if value in (None, "", {}, []):
        return ""
    return (
        f"<tr><td style='color:gray; padding-right:10px'>{label}</td>"
        f"<td>{html.escape(str(value))}</td></tr>"
    )


def _sb3_html(sb3: dict[str, Any]) -> list[str]:
    """The policy read from an SB3 zip: its spaces and hyperparameters."""
    parts = ["<h4 style='margin-bottom:2px'>Policy (from the zip)</h4><table>"]
    parts += [
        _row("Algorithm", sb3.get("algo")),
        _row("Policy class", sb3.get("policy_class")),
        _row("Timesteps", f"{sb3.get('num_timesteps', 0):,}"),
        _row("Observation space", sb3.get("observation_space")),
        _row("Action space", sb3.get("action_space")),
        _row("Vector envs", sb3.get("n_envs")),
        _row("SB3 version", sb3.get("sb3_version")),
    ]
    parts += [_row(k, v) for k, v in (sb3.get("hyperparameters") or {}).items()]
    parts.append("</table>")
    return parts


def details_html(m: dict[str, Any], source_run: str) -> str:
    """A model's details; ``source_run`` names the run that made it."""
    kind = KIND_LABELS.get(m["kind"], m["kind"])
    parts = [
        f"<h3 style='margin-bottom:2px'>{html.escape(m['name'])}</h3>"
        f"<span style='color:gray'>{kind}</span><table>",
        _row("Id", m["id"] if not on_server(m) else ""),
        _row("Environment", m.get("env")),
        _row("Algorithm", m.get("algo")),
        _row("Base", m.get("base")),
        _row("Size", fmt_bytes(m.get("size_bytes"))),
        _row("Created", fmt_time(m.get("created"))),
        _row("Source run", source_run),
        _row("Path", m.get("path")),
        _row("Server", m.get("host")),
        _row("Status", server_status(m).capitalize()),
        _row("Digest", str(m.get("digest", ""))[:19]),
        "</table>",
    ]
    metrics = m.get("metrics") or {}
    if metrics:
        parts.append("<h4 style='margin-bottom:2px'>Metrics</h4><table>")
        for k, v in metrics.items():
            parts.append(_row(k, f"{v:.5g}" if isinstance(v, float) else v))
        parts.append("</table>")
    if m.get("sb3"):
        parts += _sb3_html(m["sb3"])
    if m.get("sb3_error"):
        parts.append(f"<p style='color:#d62728'>{html.escape(str(m['sb3_error']))}</p>")
    details = m.get("details") or {}
    if details:
        parts.append("<h4 style='margin-bottom:2px'>Ollama details</h4><table>")
        parts += [_row(k, short(v)) for k, v in details.items()]
        parts.append("</table>")
    return "".join(parts)


class ModelDetailsPane(QWidget):
    """The lineage chain and the details of the model ``show`` was given."""

    selection_requested = Signal(str)
    """A model of the chain was clicked: the id of the row to select."""

    def __init__(
        self,
        state: ProjectState,
        controller: ModelsController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._state = state
        self._controller = controller
        self._records: list[dict[str, Any]] = []
        self._model_id: str | None = None
        """The id of the model shown: lineage answered for another is dropped."""
        self._links: dict[str, list[list[str]]] = {}
        self.chain = ChainView()
        self.chain.item_clicked.connect(self._on_chain_item_clicked)
        self.summary = QLabel(wordWrap=True, alignment=Qt.AlignmentFlag.AlignTop)
        self.summary.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.summary)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Lineage</b>"))
        layout.addWidget(self.chain)
        layout.addWidget(scroll, 1)

    def forget_lineage(self) -> None:
        """Drop the lineage asked so far (another project was opened)."""
        self._links.clear()

    def show_model(
        self, model: dict[str, Any] | None, records: Sequence[dict[str, Any]]
    ) -> None:
        """Show ``model`` (None: none selected) of the table's ``records``."""
        self._records = list(records)
        self._model_id = None if model is None else str(model["id"])
        if model is None:
            self.chain.set_items([], "Select a model to see where it came from.")
            self.summary.setText(
                "<i style='color:gray'>Select a model to see its details.</i>"
            )
            return
        self.summary.setText(details_html(model, self._run_name(model)))
        if on_server(model):
            self._show_ollama_chain(model)
        elif model["id"] in self._links:
            self._show_chain(model["id"])
        else:
            # Until the engine answers, draw what the state knows: the model's
            # run and what was made from it.
            if model.get("source_run"):
                self._links[model["id"]] = [
                    [model["source_run"], model["id"], "trained"]
                ]
            self._show_chain(model["id"])
            self._links.pop(model["id"], None)
            self._controller.request_lineage(
                model["id"], functools.partial(self._on_links, model["id"])
            )

    def _on_links(self, model_id: str, links: list[list[str]]) -> None:
        self._links[model_id] = links
        if self._model_id == model_id:
            self._show_chain(model_id)

    def _show_chain(self, model_id: str, ollama_name: str = "") -> None:
        nodes = lineage_chain(
            model_id,
            self._links.get(model_id, []),
            self._state.models,
            self._state.runs,
        )
        items = [
            ChainItem(
                n.key,
                n.kind,
                n.title,
                n.subtitle,
                n.current if not ollama_name else n.title == ollama_name,
            )
            for n in nodes
        ]
        self.chain.set_items(items)

    def _show_ollama_chain(self, model: dict[str, Any]) -> None:
        """An Ollama model deployed from this project: the chain of its GGUF.
        Until the engine answers (or when it was deployed from elsewhere),
        the model alone, never the chain of what was selected before."""
        name = model["name"]
        bare = name.removesuffix(":latest")
        node = ChainNode(model["id"], "ollama", name, "Ollama", current=True)
        self.chain.set_items(
            [ChainItem(node.key, node.kind, node.title, node.subtitle, True)]
        )
        # Deployed from this project: the chain of its registered model.
        for r in self._records:
            if (
                r["kind"] == "ollama"
                and not on_server(r)
                and ollama_ref(r)[0].removesuffix(":latest") == bare
            ):
                self._ask_lineage(str(model["id"]), str(r["id"]))
                return
        for run in reversed(list(self._state.runs.values())):
            config = run.get("config") or {}
            if run.get("kind") == "deploy.ollama" and config.get("name") in (
                name,
                bare,
            ):
                parents = config.get("parents") or []
                if parents:
                    deployed = str(config["name"])
                    self._ask_lineage(str(model["id"]), str(parents[0]), deployed)
                    return

    def _ask_lineage(self, shown_id: str, model_id: str, ollama_name: str = "") -> None:
        """The chain of ``model_id``, drawn while ``shown_id`` is shown (with
        ``ollama_name`` marked current when given)."""

        def show(links: list[list[str]]) -> None:
            self._links[model_id] = links
            if self._model_id == shown_id:
                self._show_chain(model_id, ollama_name=ollama_name)

        self._controller.request_lineage(model_id, show)

    def _on_chain_item_clicked(self, key: str) -> None:
        if any(r["id"] == key for r in self._records):
            self.selection_requested.emit(key)
        elif key.startswith(OLLAMA_PREFIX):
            for r in self._records:
                if r["kind"] == "ollama" and r["name"].removesuffix(":latest") == (
                    key[len(OLLAMA_PREFIX) :].removesuffix(":latest")
                ):
                    self.selection_requested.emit(r["id"])

    def _run_name(self, model: dict[str, Any]) -> str:
        run_id = model.get("source_run")
        if not run_id:
            return ""
        run = self._state.run(run_id) or {}
        name = run.get("name")
        return f"{name} ({run_id})" if name else run_id
