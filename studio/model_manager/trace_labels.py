"""The labels of the trace viewer, without Qt: the project's label database
(opened on first use), the labels of the open trace file by position as the
lists show them, and the step pinned to compare another with.

Every change is committed to ``data/labels.sqlite`` by the store before
what is shown changes; a store error (``LabelError``, ``sqlite3.Error``)
reaches the caller, which says it in one sentence.
"""

from __future__ import annotations

from engine.store.labels import (
    EPISODE,
    Label,
    LabelError,
    LabelStore,
    StepRef,
    Suggestion,
    ref_of,
    resolve,
)
from studio.state.traces import TraceFile, label_text

Position = tuple[int, int]
"""(episode, step) in the open trace file; step ``EPISODE``: the episode."""


class TraceLabels:
    """The labels shown for one trace file of one project."""

    def __init__(self) -> None:
        self.project_dir = ""
        self.store: LabelStore | None = None
        self.trace: TraceFile | None = None
        """The trace file shown (None: none, or it could not be read)."""
        self.pinned: StepRef | None = None
        self._shown: dict[Position, dict[str, str]] = {}
        """Position -> kind -> what its label shows."""

    def set_project(self, project_dir: str) -> None:
        if project_dir != self.project_dir:
            self.close()
        self.project_dir = project_dir
        self.pinned = None

    def close(self) -> None:
        """Close the label database (labels are committed already)."""
        if self.store is not None:
            self.store.close()
            self.store = None

    def open(self) -> LabelStore | None:
        """The label database (None without a project); raises
        ``sqlite3.Error`` when it cannot be opened."""
        if self.store is None and self.project_dir:
            self.store = LabelStore(self.project_dir)
        return self.store

    def show_trace(self, trace: TraceFile | None) -> int:
        """Show the labels of ``trace`` (from the store when it is open);
        returns how many of them point at steps the file no longer has."""
        self.trace = trace
        self.pinned = None
        self._shown = {}
        if self.store is None or trace is None:
            return 0
        labels = self.store.labels(trace=trace.name)
        for label in labels:
            self.remember(label.kind, label.episode, label.step, label)
        return resolve(labels, {trace.name: trace.episodes}).orphans

    # ------------------------------------------------------------ shown
    def remember(self, kind: str, episode: int, step: int, label: Label | None) -> None:
        """Keep the shown label of a position (``label`` None: none)."""
        slot = self._shown.setdefault((episode, step), {})
        if label is None:
            slot.pop(kind, None)
            if not slot:
                self._shown.pop((episode, step), None)
            return
        value = label.value
        if kind == "dpo":
            value = f"{label.other_episode}:{label.other_step}"
        slot[kind] = value

    def step_text(self, episode: int, step: int) -> str:
        slot = self._shown.get((episode, step), {})
        return label_text(slot.get("kto"), "sft" in slot, slot.get("dpo"))

    def episode_text(self, episode: int) -> str:
        own = self._shown.get((episode, EPISODE), {}).get("kto", "")
        n = sum(1 for e, t in self._shown if e == episode and t != EPISODE)
        if n:
            return f"{own} ({n} steps)".strip()
        return own

    def labelled_episodes(self) -> set[int]:
        return {e for e, _ in self._shown}

    def ideal(self, pos: Position) -> str | None:
        """The ideal answer (SFT) given for a step, None when none."""
        return self._shown.get(pos, {}).get("sft")

    # ------------------------------------------------------------ changes
    def _open_trace(self) -> tuple[LabelStore, TraceFile]:
        if self.store is None or self.trace is None:
            raise LabelError("Open a project and a trace file to label.")
        return self.store, self.trace

    def ref(self, pos: Position) -> StepRef:
        _, trace = self._open_trace()
        return ref_of(trace.name, trace.episodes, *pos)

    def label(self, pos: Position, value: str) -> None:
        """Good or bad (KTO) on a step or, at step ``EPISODE``, an episode."""
        store, _ = self._open_trace()
        self.remember("kto", *pos, store.set("kto", self.ref(pos), value))

    def clear(self, pos: Position) -> bool:
        """Remove the good/bad label of ``pos``; False when it had none."""
        store, trace = self._open_trace()
        if store.remove("kto", trace.name, *pos) is None:
            return False
        self.remember("kto", *pos, None)
        return True

    def set_ideal(self, pos: Position, text: str) -> None:
        store, _ = self._open_trace()
        self.remember("sft", *pos, store.set("sft", self.ref(pos), text))

    def pin(self, pos: Position) -> None:
        self.pinned = self.ref(pos)

    def prefer(
        self, pos: Position, pinned_better: bool
    ) -> tuple[StepRef, StepRef] | None:
        """Compare ``pos`` with the pinned step (DPO); (better, worse), or
        None when no step of this file is pinned."""
        store, trace = self._open_trace()
        if self.pinned is None or self.pinned.trace != trace.name:
            return None
        here = self.ref(pos)
        better, worse = (self.pinned, here) if pinned_better else (here, self.pinned)
        label = store.set("dpo", better, "better", other=worse)
        self.remember("dpo", better.episode, better.step, label)
        return better, worse

    def undo(self) -> list[Position]:
        """Undo the last change of the store; the positions of the open file
        it changed."""
        changed: list[Position] = []
        if self.store is None:
            return changed
        for item in self.store.undo():
            if isinstance(item, tuple):
                kind, trace, episode, step = item
                label = None
            else:
                kind, trace, episode, step = (
                    item.kind,
                    item.trace,
                    item.episode,
                    item.step,
                )
                label = item
            if self.trace is not None and trace == self.trace.name:
                self.remember(kind, episode, step, label)
                changed.append((episode, step))
        return changed

    def unlabelled(self, suggestions: list[Suggestion]) -> list[Suggestion]:
        """The ``suggestions`` whose step has no good/bad label: one labelled
        by hand since the list was made keeps that label."""
        store = self.store
        if store is None:
            return []
        return [
            s
            for s in suggestions
            if store.get("kto", s.trace, s.episode, s.step) is None
        ]

    def review(self, chosen: list[Suggestion], correct: bool) -> int:
        """Accept the suggestions ``chosen`` (or, ``correct``, give them the
        opposite label) in one commit; how many were stored."""
        store, _ = self._open_trace()
        n = store.review([], chosen) if correct else store.review(chosen, [])
        flip = {"good": "bad", "bad": "good"}
        for sug in chosen:
            value = flip[sug.value] if correct else sug.value
            self._shown.setdefault((sug.episode, sug.step), {})["kto"] = value
        return n
