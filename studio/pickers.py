"""What the studio's pickers offer, by the ``picker`` kind a setting declares
(``engine.settings.PICKER_KINDS``), and the forms that show them.

* ``env``: the project's designed envs, shown by name with their
  ``rlstudio/<name>-v0`` id derived by ``engine.contract.env_id``, and the
  Gymnasium envs installed where the engine runs (``env.catalog``). A value
  none of them has is said to be unknown, in one sentence.
* ``base_model``: model folders of the project, the models in the local
  Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``) and, as the
  user types, a search of the Hub (``hub.search``, through
  ``$HF_ENDPOINT``). A search that fails says so in one sentence; the local
  entries stay.

One :class:`PickerSources` per session (:func:`picker_sources`) keeps the
entries; :meth:`PickerSources.attach` keeps a ``ParamForm``'s pickers fed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from engine import contract
from studio.engine_client import READY
from studio.lifetime import is_alive, subscribe
from studio.session import Session
from widgets.param_form import ParamForm
from widgets.picker import PickerEntry, SearchPicker

if TYPE_CHECKING:  # imported when first asked: its 46 message classes cost launch
    from engine import protocol

ENV, BASE_MODEL = "env", "base_model"
PROJECT_SECTION = "This project"
GYM_SECTION = "Gymnasium"
CACHE_SECTION = "Hugging Face cache"
HUB_SECTION = "Hugging Face Hub"
DESIGNED_KINDS = ("workflow", "grid", "python")
"""Env document kinds that register as ``rlstudio/<name>-v0``."""
HF_MODEL_KINDS = ("hf", "hf-merged", "hf-model")
"""Project model kinds that are full Hugging Face model folders."""
UNKNOWN_ENV = (
    "{value} is unknown: it is neither a Gymnasium env installed here nor a "
    "designed env of this project."
)
HUB_LIMIT = 20


def hf_hub_cache() -> Path:
    """The Hugging Face cache folder, found as ``huggingface_hub`` finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def cached_models(cache: Path | None = None) -> list[str]:
    """Hub ids of the models in the cache with a complete snapshot (one
    holding ``config.json``), sorted."""
    cache = hf_hub_cache() if cache is None else cache
    out = []
    try:
        folders = sorted(cache.glob("models--*"))
    except OSError:
        return []
    for folder in folders:
        repo = folder.name.removeprefix("models--").replace("--", "/")
        if any((snap / "config.json").is_file() for snap in folder.glob("snapshots/*")):
            out.append(repo)
    return out


def env_entries(
    catalog: list[dict[str, Any]], project_envs: list[dict[str, Any]]
) -> list[PickerEntry]:
    """The project's designed envs (by name), then the installed ones."""
    out = [
        PickerEntry(
            contract.env_id(str(doc["name"])),
            label=str(doc["name"]),
            section=PROJECT_SECTION,
            detail=f"{doc.get('kind')} env · {contract.env_id(str(doc['name']))}",
        )
        for doc in project_envs
        if doc.get("kind") in DESIGNED_KINDS
    ]
    designed = {e.value for e in out}
    for env in catalog:
        env_id = str(env.get("id", ""))
        if not env_id or env_id in designed or contract.env_name(env_id):
            continue  # designed envs of the project are listed by name above
        out.append(PickerEntry(env_id, section=GYM_SECTION))
    return out


def base_model_entries(
    models: list[contract.ModelRow] | list[dict[str, Any]], cached: list[str]
) -> list[PickerEntry]:
    """Model folders of the project, then the models in the HF cache."""
    out = [
        PickerEntry(
            str(m["path"]),
            label=str(m.get("name") or Path(str(m["path"])).name),
            section=PROJECT_SECTION,
            detail=str(m.get("kind", "")),
        )
        for m in models
        if m.get("kind") in HF_MODEL_KINDS and m.get("path")
    ]
    out += [PickerEntry(repo, section=CACHE_SECTION) for repo in cached]
    return out


class PickerSources(QObject):
    """The entries of each picker kind for one session.

    Signals: ``entries_changed(kind)``, ``status_changed(kind, sentence)``.
    """

    entries_changed = Signal(str)
    status_changed = Signal(str, str)

    def __init__(self, session: Session, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self.catalog: list[dict[str, Any]] = []
        self.catalog_received = False
        self.hub_models: list[dict[str, Any]] = []
        self.status: dict[str, str] = {ENV: "", BASE_MODEL: ""}
        self._search_token = 0
        self._entries: dict[str, list[PickerEntry]] = {ENV: [], BASE_MODEL: []}
        subscribe(session.state, self, self._on_state_changed)
        session.project_opened.connect(self._on_session_project_opened)
        if session.client.state == READY:
            self.request_catalog()
        self.refresh()

    # ------------------------------------------------------------ API
    def entries(self, kind: str) -> list[PickerEntry]:
        return list(self._entries.get(kind, []))

    def refresh(self) -> None:
        """Rebuild the local entries (the project, the HF cache)."""
        state = self._session.state
        self._entries[ENV] = env_entries(self.catalog, state.envs)
        hub = [
            PickerEntry(
                str(m["id"]),
                section=HUB_SECTION,
                detail=f"{int(m.get('downloads') or 0):,} downloads"
                + (" · gated" if m.get("gated") else ""),
            )
            for m in self.hub_models
        ]
        local = base_model_entries(state.models, cached_models())
        known = {e.value for e in local}
        self._entries[BASE_MODEL] = local + [e for e in hub if e.value not in known]
        self.entries_changed.emit(ENV)
        self.entries_changed.emit(BASE_MODEL)

    def request_catalog(self) -> None:
        from engine import protocol

        self._session.client.request(
            protocol.GetEnvCatalog(),
            on_reply=self._on_catalog_reply,
            on_error=self._on_catalog_error,
        )

    def search_hub(self, query: str) -> None:
        """Search the Hub for ``query``; answers replace the Hub entries, a
        failure is one sentence in ``status``."""
        from engine import protocol

        self._search_token += 1
        token = self._search_token
        self._session.client.request(
            protocol.SearchHub(query=query, limit=HUB_LIMIT),
            on_reply=lambda r: self._on_search_reply(token, r),
            on_error=lambda e: self._on_search_error(token, e),
            owner=self,
        )

    def attach(self, form: ParamForm) -> None:
        """Feed ``form``'s pickers for as long as it lives."""
        form.configure_picker(
            ENV, strict=self.catalog_received, unknown_message=UNKNOWN_ENV
        )
        form.configure_picker(BASE_MODEL, browse_folders=True)
        for kind in (ENV, BASE_MODEL):
            form.set_picker_entries(kind, self._entries[kind])
            form.set_picker_status(kind, self.status[kind])

        def on_entries(kind: str) -> None:
            if is_alive(form):
                if kind == ENV:
                    form.configure_picker(
                        ENV, strict=self.catalog_received, unknown_message=UNKNOWN_ENV
                    )
                form.set_picker_entries(kind, self._entries[kind])

        def on_status(kind: str, text: str) -> None:
            if is_alive(form):
                form.set_picker_status(kind, text)

        self.entries_changed.connect(on_entries)
        self.status_changed.connect(on_status)
        form.picker_search_requested.connect(self._on_form_picker_search_requested)
        form.destroyed.connect(lambda *_: self._detach(on_entries, on_status))

    def attach_picker(self, picker: SearchPicker, kind: str) -> None:
        """Feed one picker outside a form (a list to drag envs from)."""
        picker.set_entries(self._entries[kind])

        def on_entries(changed: str) -> None:
            if changed == kind and is_alive(picker):
                picker.set_entries(self._entries[kind])

        self.entries_changed.connect(on_entries)
        picker.destroyed.connect(lambda *_: self._detach(on_entries))

    # ------------------------------------------------------- handlers
    def _detach(self, *slots: Any) -> None:
        for signal, slot in zip(
            (self.entries_changed, self.status_changed), slots, strict=False
        ):
            with contextlib.suppress(RuntimeError, TypeError):
                signal.disconnect(slot)  # may be gone with the session

    def _on_state_changed(self, what: str, key: str) -> None:
        if what in ("reset", "models", "documents"):
            self.refresh()

    def _on_session_project_opened(self, path: str) -> None:
        # Designed envs register with the project: the catalog may change.
        self.request_catalog()

    def _on_catalog_reply(self, result: dict[str, Any]) -> None:
        self.catalog = [e for e in result.get("envs", []) if isinstance(e, dict)]
        self.catalog_received = True
        self.refresh()

    def _on_catalog_error(self, error: protocol.Error) -> None:
        # Without the catalog no value can be called unknown; pickers still
        # list the project's envs.
        self.status[ENV] = ""

    def _on_form_picker_search_requested(self, kind: str, text: str) -> None:
        if kind == BASE_MODEL and text and "/" not in text[:1] and len(text) >= 2:
            self.search_hub(text)

    def _on_search_reply(self, token: int, result: dict[str, Any]) -> None:
        if token != self._search_token:
            return  # a newer search replaced this one
        self.hub_models = [m for m in result.get("models", []) if isinstance(m, dict)]
        self._set_status(BASE_MODEL, "")
        self.refresh()

    def _on_search_error(self, token: int, error: protocol.Error) -> None:
        if token != self._search_token:
            return
        self.hub_models = []
        self._set_status(BASE_MODEL, error.message)
        self.refresh()

    def _set_status(self, kind: str, text: str) -> None:
        self.status[kind] = text
        self.status_changed.emit(kind, text)


def picker_sources(session: Session) -> PickerSources:
    """The session's :class:`PickerSources` (made on first use)."""
    found = session.findChild(PickerSources)
    return found if found is not None else PickerSources(session, session)
