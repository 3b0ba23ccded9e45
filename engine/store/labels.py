"""Manual labels of traces: good/bad (KTO), the better of two (DPO), an ideal
answer (SFT), with who set them and when.

Labels live in the project's ``data/labels.sqlite`` (WAL), not in
``studio.sqlite``: the studio writes them at keyboard speed while only the
supervisor writes the catalog, and a labelling session must neither wait
on the catalog's lock nor make an open studio reload its run list.

Every change is committed before the call returns (a crash of the studio a
moment later loses nothing) and is also appended to ``label_log``, so a
label that was overwritten or undone can still be recovered: no label is
ever lost.

A label points at a step of a trace file (``data/traces/<trace>.jsonl``)
by its position (``episode`` index in the file, ``step`` index, ``-1`` for
the whole episode) and a content ``key`` (a hash of the step's prompt and
completion): a trace file that was deleted or rewritten since leaves its
labels *orphaned*, kept and reported, never silently applied to another
step.

With a PostgreSQL database configured for the project
(:mod:`engine.store.database`) the labels live there instead, shared by
every process and machine that labels or trains on them.

Standard library only: the GUI imports it (see ``ignore_imports`` in
``pyproject.toml``).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.store.database import Schema, configured, open_database

DB_FILE = "data/labels.sqlite"
KINDS = ("kto", "dpo", "sft")
"""What a label says: ``kto`` good/bad, ``dpo`` this step is better than
``other``, ``sft`` the ideal answer in ``value``."""
KTO_VALUES = ("good", "bad")
SOURCES = ("manual", "auto")
"""``manual``: set by a person; ``auto``: an accepted suggestion of the
auto-labeler (it counts as the person's, who accepted it)."""
EPISODE = -1
"""The ``step`` of a label that is about the whole episode."""
MAX_ANSWER_CHARS = 100_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS labels (
    kind TEXT NOT NULL,
    trace TEXT NOT NULL,
    episode INTEGER NOT NULL,
    step INTEGER NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    other_episode INTEGER,
    other_step INTEGER,
    other_key TEXT,
    source TEXT NOT NULL DEFAULT 'manual',
    who TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (kind, trace, episode, step)
);
CREATE TABLE IF NOT EXISTS suggestions (
    trace TEXT NOT NULL,
    episode INTEGER NOT NULL,
    step INTEGER NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    confidence REAL NOT NULL,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (trace, episode, step)
);
CREATE TABLE IF NOT EXISTS agreement (
    at REAL NOT NULL,
    model TEXT NOT NULL,
    source TEXT NOT NULL,
    agreed INTEGER NOT NULL,
    total INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS label_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    who TEXT NOT NULL,
    action TEXT NOT NULL,
    label TEXT NOT NULL
);
"""
SCHEMA = Schema(DB_FILE, _SCHEMA)
_LOG_SQL = "INSERT INTO label_log (at, who, action, label) VALUES (?, ?, ?, ?)"
_SUGGESTION_FIELDS = (
    *("trace", "episode", "step", "key", "value"),
    *("confidence", "model", "created"),
)


class LabelError(ValueError):
    """A label that cannot be stored; the message is one sentence."""


@dataclass(frozen=True)
class StepRef:
    """Where a label points: a step (or, with ``step == EPISODE``, an
    episode) of a trace file, and the content key it had then."""

    trace: str
    episode: int
    step: int
    key: str


@dataclass(frozen=True)
class Label:
    kind: str
    trace: str
    episode: int
    step: int
    key: str
    value: str
    other_episode: int | None = None
    other_step: int | None = None
    other_key: str | None = None
    source: str = "manual"
    who: str = ""
    created: float = 0.0

    @property
    def ref(self) -> StepRef:
        return StepRef(self.trace, self.episode, self.step, self.key)

    @property
    def other(self) -> StepRef | None:
        if self.other_episode is None or self.other_step is None:
            return None
        return StepRef(
            self.trace, self.other_episode, self.other_step, self.other_key or ""
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = tuple(Label.__dataclass_fields__)


@dataclass(frozen=True)
class Suggestion:
    """The auto-labeler's good/bad for an unlabelled step, and how sure it is
    (0.5 to 1)."""

    trace: str
    episode: int
    step: int
    key: str
    value: str
    confidence: float
    model: str

    @property
    def ref(self) -> StepRef:
        return StepRef(self.trace, self.episode, self.step, self.key)


@dataclass(frozen=True)
class Agreement:
    """How far a reward model agreed with the person's labels: on held-out
    labels when it was trained (``held-out``), or in a review of its
    suggestions (``review``: accepted vs corrected)."""

    at: float
    model: str
    source: str
    agreed: int
    total: int

    @property
    def rate(self) -> float:
        return self.agreed / self.total if self.total else 0.0


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def step_key(step: dict[str, Any]) -> str:
    """The content key of a trace step: its prompt and its completion."""
    return _hash([step.get("messages") or step.get("prompt"), step.get("completion")])


def episode_key(episode: dict[str, Any]) -> str:
    """The content key of an episode: its task and its completions."""
    steps = episode.get("steps") or []
    return _hash(
        [
            episode.get("task_id"),
            [s.get("completion") for s in steps if isinstance(s, dict)],
        ]
    )


def ref_of(
    trace: str, episodes: Sequence[dict[str, Any]], episode: int, step: int
) -> StepRef:
    """The reference of a step (or whole episode) of loaded ``episodes``."""
    ep = episodes[episode]
    if step == EPISODE:
        return StepRef(trace, episode, EPISODE, episode_key(ep))
    return StepRef(trace, episode, step, step_key(ep["steps"][step]))


def default_who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "") or "unknown"


def checked_label(data: Any) -> Label:
    """A label from untrusted data (a label file line, a request); raises
    :class:`LabelError` with one sentence."""
    if not isinstance(data, dict):
        raise LabelError("A label must be a JSON object.")
    missing = [
        f for f in ("kind", "trace", "episode", "step", "value") if f not in data
    ]
    if missing:
        raise LabelError(f"The label lacks {', '.join(missing)}.")
    kind = data["kind"]
    if kind not in KINDS:
        raise LabelError(
            f"A label's kind must be one of {', '.join(KINDS)}, not {kind!r}."
        )
    for name in ("episode", "step"):
        v = data[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < EPISODE:
            raise LabelError(f"A label's {name} must be a whole number, not {v!r}.")
    if not isinstance(data["trace"], str) or not data["trace"].strip():
        raise LabelError("A label's trace must name a trace file.")
    value = data["value"]
    if not isinstance(value, str):
        raise LabelError(f"A label's value must be text, not {value!r}.")
    if kind == "kto" and value not in KTO_VALUES:
        raise LabelError(f"A KTO label's value must be good or bad, not {value!r}.")
    if kind == "sft" and (not value.strip() or len(value) > MAX_ANSWER_CHARS):
        raise LabelError(
            "An ideal answer must be non-empty text of at most "
            f"{MAX_ANSWER_CHARS} characters."
        )
    if kind in ("dpo", "sft") and data["step"] == EPISODE:
        raise LabelError(
            f"A {kind.upper()} label is about a step, not a whole episode."
        )
    other = (data.get("other_episode"), data.get("other_step"))
    if kind == "dpo":
        if not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in other
        ):
            raise LabelError("A DPO label must name the other (worse) step.")
        if other == (data["episode"], data["step"]):
            raise LabelError("A DPO label compares two different steps.")
    source = data.get("source", "manual")
    if source not in SOURCES:
        raise LabelError(f"A label's source must be manual or auto, not {source!r}.")
    created = data.get("created", 0.0)
    return Label(
        kind=kind,
        trace=data["trace"],
        episode=data["episode"],
        step=data["step"],
        key=str(data.get("key") or ""),
        value=value,
        other_episode=other[0] if kind == "dpo" else None,
        other_step=other[1] if kind == "dpo" else None,
        other_key=str(data.get("other_key") or "") if kind == "dpo" else None,
        source=source,
        who=str(data.get("who") or ""),
        created=float(created) if isinstance(created, int | float) else 0.0,
    )


class LabelStore:
    """The project's labels; one instance per process. ``undo`` takes back
    this instance's own changes, last first."""

    def __init__(
        self,
        project_dir: str | os.PathLike[str],
        who: str | None = None,
        database: str | None = None,
    ) -> None:
        """``database``: a PostgreSQL URL (default:
        :func:`engine.store.database.configured`, else the project's
        ``data/labels.sqlite``)."""
        self.who = who or default_who()
        self._db = open_database(project_dir, SCHEMA, database)
        self._upsert_label = self._db.upsert_sql(
            "labels", _FIELDS, ("kind", "trace", "episode", "step")
        )
        self._upsert_suggestion = self._db.upsert_sql(
            "suggestions", _SUGGESTION_FIELDS, ("trace", "episode", "step")
        )
        self._undo: list[tuple[tuple[str, str, int, int], Label | None]] = []

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------- reading
    def labels(self, trace: str | None = None, kind: str | None = None) -> list[Label]:
        sql = f"SELECT {', '.join(_FIELDS)} FROM labels"
        where, args = [], []
        if trace is not None:
            where.append("trace = ?")
            args.append(trace)
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY trace, episode, step, kind"
        return [Label(*row) for row in self._db.execute(sql, args)]

    def get(self, kind: str, trace: str, episode: int, step: int) -> Label | None:
        row = self._db.execute(
            f"SELECT {', '.join(_FIELDS)} FROM labels WHERE kind=? AND trace=? "
            "AND episode=? AND step=?",
            (kind, trace, episode, step),
        ).fetchone()
        return Label(*row) if row else None

    def traces(self) -> dict[str, int]:
        """Trace name -> how many labels point into it."""
        rows = self._db.execute(
            "SELECT trace, COUNT(*) FROM labels GROUP BY trace"
        ).fetchall()
        return {str(trace): int(n) for trace, n in rows}

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM labels").fetchone()[0])

    # ------------------------------------------------------------- writing
    def set(
        self,
        kind: str,
        ref: StepRef,
        value: str,
        *,
        other: StepRef | None = None,
        source: str = "manual",
    ) -> Label:
        """Set (or replace) the ``kind`` label of ``ref``; committed when it
        returns."""
        data: dict[str, Any] = {
            "kind": kind,
            "trace": ref.trace,
            "episode": ref.episode,
            "step": ref.step,
            "key": ref.key,
            "value": value,
            "source": source,
        }
        if other is not None:
            data.update(
                other_episode=other.episode, other_step=other.step, other_key=other.key
            )
        label = checked_label(data)
        label = Label(**{**label.to_dict(), "who": self.who, "created": time.time()})
        self._write([label], [])
        return label

    def set_many(self, labels: Iterable[Label]) -> int:
        """Store many labels in one transaction (accepted suggestions, an
        imported label file); one undo step takes them all back."""
        now = time.time()
        rows = [
            Label(
                **{
                    **checked_label(lb.to_dict()).to_dict(),
                    "who": self.who,
                    "created": now,
                }
            )
            for lb in labels
        ]
        self._write(rows, [])
        return len(rows)

    def remove(self, kind: str, trace: str, episode: int, step: int) -> Label | None:
        old = self.get(kind, trace, episode, step)
        if old is not None:
            self._write([], [old])
        return old

    def undo(self) -> list[Label | tuple[str, str, int, int]]:
        """Take back the last change of this store (all the labels one call
        set); returns what is now in place of each (the label put back, or
        the (kind, trace, episode, step) that has none again); empty when
        there is nothing to undo."""
        if not self._undo:
            return []
        batch = self._undo.pop()
        put: list[Label] = []
        drop: list[Label] = []
        out: list[Label | tuple[str, str, int, int]] = []
        for pk, previous in batch:  # type: ignore[misc]
            if previous is None:
                current = self.get(*pk)
                if current is not None:
                    drop.append(current)
                out.append(pk)
            else:
                put.append(previous)
                out.append(previous)
        self._write(put, drop, record_undo=False, action="undo")
        return out

    @property
    def can_undo(self) -> bool:
        return bool(self._undo)

    def _write(
        self,
        put: list[Label],
        drop: list[Label],
        *,
        record_undo: bool = True,
        action: str = "set",
    ) -> None:
        now = time.time()
        batch: list[tuple[tuple[str, str, int, int], Label | None]] = []
        db = self._db
        with db.transaction():
            for label in put:
                pk = (label.kind, label.trace, label.episode, label.step)
                batch.append((pk, self.get(*pk)))
                db.execute(
                    self._upsert_label, tuple(getattr(label, f) for f in _FIELDS)
                )
                db.execute(
                    _LOG_SQL,
                    (now, self.who, action, json.dumps(label.to_dict())),
                )
            for label in drop:
                pk = (label.kind, label.trace, label.episode, label.step)
                batch.append((pk, label))
                db.execute(
                    "DELETE FROM labels "
                    "WHERE kind=? AND trace=? AND episode=? AND step=?",
                    pk,
                )
                db.execute(
                    _LOG_SQL,
                    (
                        now,
                        self.who,
                        "remove" if action == "set" else action,
                        json.dumps(label.to_dict()),
                    ),
                )
        if record_undo and batch:
            self._undo.append(batch)  # type: ignore[arg-type]

    # ------------------------------------------------------ auto-labeler
    def replace_suggestions(self, traces: list[str], rows: list[Suggestion]) -> None:
        """The suggestions for these traces become ``rows`` (one commit)."""
        now = time.time()
        db = self._db
        with db.transaction():
            db.executemany(
                "DELETE FROM suggestions WHERE trace = ?", [(t,) for t in traces]
            )
            db.executemany(
                self._upsert_suggestion,
                [
                    (
                        r.trace,
                        r.episode,
                        r.step,
                        r.key,
                        r.value,
                        r.confidence,
                        r.model,
                        now,
                    )
                    for r in rows
                ],
            )

    def suggestions(self, trace: str | None = None) -> list[Suggestion]:
        """Open suggestions (of steps that have no good/bad label yet), least
        confident first."""
        sql = (
            "SELECT s.trace, s.episode, s.step, s.key, s.value, s.confidence, "
            "s.model FROM suggestions s WHERE NOT EXISTS (SELECT 1 FROM labels l "
            "WHERE l.kind = 'kto' AND l.trace = s.trace AND l.episode = s.episode "
            "AND l.step = s.step)"
        )
        args: list[Any] = []
        if trace is not None:
            sql += " AND s.trace = ?"
            args.append(trace)
        sql += " ORDER BY s.confidence, s.trace, s.episode, s.step"
        return [Suggestion(*row) for row in self._db.execute(sql, args)]

    def review(self, accepted: list[Suggestion], corrected: list[Suggestion]) -> int:
        """Accept some suggestions as they are and correct others (the
        opposite label), in one commit and one undo step; the review counts
        toward the model's agreement. Returns the labels stored."""
        flip = {"good": "bad", "bad": "good"}
        labels = [
            Label("kto", s.trace, s.episode, s.step, s.key, s.value, source="auto")
            for s in accepted
        ] + [
            Label("kto", s.trace, s.episode, s.step, s.key, flip[s.value])
            for s in corrected
        ]
        n = self.set_many(labels)
        models = {s.model for s in accepted + corrected}
        for model in sorted(models):
            self.add_agreement(
                model,
                "review",
                sum(1 for s in accepted if s.model == model),
                sum(1 for s in accepted + corrected if s.model == model),
            )
        return n

    def add_agreement(self, model: str, source: str, agreed: int, total: int) -> None:
        self._db.execute(
            "INSERT INTO agreement VALUES (?, ?, ?, ?, ?)",
            (time.time(), model, source, agreed, total),
        )

    def agreement(self) -> list[Agreement]:
        """Every agreement record, oldest first."""
        return [
            Agreement(*row)
            for row in self._db.execute(
                "SELECT at, model, source, agreed, total FROM agreement ORDER BY at"
            )
        ]

    # ------------------------------------------------------ files (JSON Lines)
    def export_lines(self) -> Iterator[str]:
        for label in self.labels():
            yield json.dumps(label.to_dict(), ensure_ascii=False)

    def export_file(self, path: str | os.PathLike[str]) -> int:
        """Write every label as JSON Lines (atomically: a crash leaves the
        old file or the new one). Returns how many."""
        lines = list(self.export_lines())
        target = Path(path)
        tmp = target.with_name(f".{target.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        return len(lines)

    def import_file(self, path: str | os.PathLike[str]) -> tuple[int, list[str]]:
        """Add the labels of a JSON Lines label file; a bad line is skipped
        with one sentence (line number and why), the good ones are stored in
        one transaction. Returns (stored, problems)."""
        good: list[Label] = []
        problems: list[str] = []
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise LabelError(
                f"Cannot read {Path(path).name}: {exc.strerror}."
            ) from None
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                good.append(checked_label(json.loads(line)))
            except ValueError as exc:
                why = (
                    str(exc) if isinstance(exc, LabelError) else "it is not valid JSON."
                )
                problems.append(f"Line {n} of {Path(path).name} was skipped: {why}")
        if good:
            self.set_many(good)
        return len(good), problems


# ------------------------------------------------------------ applying labels
@dataclass
class Resolved:
    """The labels of some trace files matched to their steps."""

    kto: dict[tuple[str, int, int], bool]
    """(trace, episode, step) -> desirable; episode labels spread to steps
    that have none of their own."""
    sft: dict[tuple[str, int, int], str]
    """(trace, episode, step) -> ideal answer."""
    dpo: list[tuple[tuple[str, int, int], tuple[str, int, int]]]
    """(better, worse) step pairs."""
    orphans: int = 0
    """Labels whose step is gone or changed (the trace was deleted or
    rewritten): kept in the database, not used."""


def resolve(
    labels: Iterable[Label], traces: Mapping[str, Sequence[dict[str, Any]]]
) -> Resolved:
    """Match ``labels`` to the episodes of ``traces`` (name -> episodes);
    labels of other traces are left out, those whose key no longer matches
    count as orphans."""

    def live(trace: str, episode: int, step: int, key: str | None) -> bool:
        eps = traces.get(trace)
        if eps is None or not 0 <= episode < len(eps):
            return False
        ep = eps[episode]
        if step == EPISODE:
            return episode_key(ep) == key
        steps = ep.get("steps") or []
        return 0 <= step < len(steps) and step_key(steps[step]) == key

    out = Resolved({}, {}, [])
    episode_labels: list[Label] = []
    for label in labels:
        if label.trace not in traces:
            continue
        if not live(label.trace, label.episode, label.step, label.key):
            out.orphans += 1
            continue
        pos = (label.trace, label.episode, label.step)
        if label.kind == "kto":
            if label.step == EPISODE:
                episode_labels.append(label)
            else:
                out.kto[pos] = label.value == "good"
        elif label.kind == "sft":
            out.sft[pos] = label.value
        elif label.kind == "dpo":
            other = label.other
            if other is None or not live(
                label.trace, other.episode, other.step, other.key
            ):
                out.orphans += 1
                continue
            out.dpo.append((pos, (label.trace, other.episode, other.step)))
    for label in episode_labels:
        n = len(traces[label.trace][label.episode].get("steps") or [])
        for t in range(n):
            out.kto.setdefault((label.trace, label.episode, t), label.value == "good")
    return out


def orphan_sentence(n: int) -> str:
    return (
        f"{n} label(s) point at steps that are gone or changed (their trace "
        "was deleted or rewritten); they are kept in data/labels.sqlite but not used."
    )


def has_labels(project_dir: str | os.PathLike[str]) -> bool:
    """Whether the project may hold labels: it has a label database (a
    PostgreSQL one configured, or ``data/labels.sqlite``); readers skip
    opening, and so creating, one otherwise."""
    return bool(configured(project_dir)) or (Path(project_dir) / DB_FILE).is_file()


def fingerprint(
    project_dir: str | os.PathLike[str], traces: Sequence[str]
) -> dict[str, Any]:
    """The labels of ``traces`` as a cache key reads them: how many there
    are (``rows``) and a digest of their content, read without creating the
    database when the project has none. A flow node that builds on labels
    runs again when this changes."""
    if not has_labels(project_dir) or not traces:
        return {"rows": 0, "digest": ""}
    names = sorted(set(traces))
    sql = (
        f"SELECT {', '.join(_FIELDS)} FROM labels "
        f"WHERE trace IN ({', '.join('?' * len(names))}) "
        "ORDER BY trace, episode, step, kind"
    )
    if configured(project_dir):
        store = LabelStore(project_dir)
        try:
            rows = [tuple(r) for r in store._db.execute(sql, names).fetchall()]
        finally:
            store.close()
    else:
        path = Path(project_dir) / DB_FILE
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=10.0)
        try:
            rows = db.execute(sql, names).fetchall()
        except sqlite3.OperationalError:  # no labels table yet
            rows = []
        finally:
            db.close()
    # Who set a label and when do not change what is trained on.
    kept = [f for f in _FIELDS if f not in ("who", "created")]
    content = [[row[_FIELDS.index(f)] for f in kept] for row in rows]
    digest = hashlib.sha256(json.dumps(content).encode("utf-8")).hexdigest()
    return {"rows": len(rows), "digest": digest}
