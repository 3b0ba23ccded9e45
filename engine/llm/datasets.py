"""Training sets built from traces, in TRL's conversational formats.

* ``sft``: ``prompt`` (messages), ``completion`` ([assistant message]) — the
  steps of successful episodes whose completion named a valid tool.
* ``kto``: ``prompt``, ``completion``, ``label`` (desirable or not), balanced
  by downsampling the larger class to ``kto_max_ratio`` times the smaller.
* ``dpo``: ``prompt``, ``chosen``, ``rejected`` — two different completions
  recorded at the same state (same prompt), the better step reward preferred.
* ``grpo``: ``prompt``, ``env`` (spec path or id), ``env_state`` (JSON of
  ``get_state()``), ``valid_tools``, ``expert_tool`` — what reward functions
  need to score any completion.

Manual labels (:mod:`engine.store.labels`, set in the studio's traces view)
come first: a step labelled good or bad is a KTO row with that label, an
ideal answer an SFT row (and, for DPO, preferred over the recorded
completion), a picked better-of-two a DPO pair; the env reward labels the
remaining steps as above. ``stats.json`` says how many rows came from each
(``manual_rows``, ``env_rows``).

A dataset folder (``<project>/data/datasets/<name>/``) holds
``train.jsonl``, ``validation.jsonl``, the same as ``.parquet``, and
``stats.json`` (counts, class balance, lengths).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.llm.rollouts import iter_traces
from engine.llm.train import METHODS, SEED_MAX
from engine.progress import Progress
from engine.settings import build, drawn_seed, setting
from engine.store.atomic import atomic_write_json, atomic_write_text, temp_path
from engine.store.labels import (
    LabelStore,
    Resolved,
    has_labels,
    orphan_sentence,
    resolve,
)
from engine.store.paths import checked_name, child

T = TypeVar("T")

COLUMNS: dict[str, tuple[str, ...]] = {
    "sft": ("prompt", "completion"),
    "kto": ("prompt", "completion", "label"),
    "dpo": ("prompt", "chosen", "rejected"),
    "grpo": ("prompt", "env", "env_state"),
}


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _step_rows(
    episodes: list[dict[str, Any]],
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for ep in episodes:
        for st in ep.get("steps", []):
            yield ep, st


def build_sft(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"prompt": st["messages"], "completion": _assistant(st["completion"])}
        for ep, st in _step_rows(episodes)
        if ep.get("success") and st.get("parsed") and st.get("valid")
    ]


def _desirable(ep: dict[str, Any], st: dict[str, Any]) -> bool:
    if not (st.get("parsed") and st.get("valid")):
        return False
    expert = st.get("expert_tool")
    if expert is not None:
        return bool(st.get("tool") == expert)
    return bool(ep.get("success")) or float(st.get("reward", 0.0)) > 0


def build_kto(
    episodes: list[dict[str, Any]], max_ratio: float = 1.0, seed: int = 0
) -> list[dict[str, Any]]:
    """Desirable: a parsed, valid step that the expert would take (or, without
    an expert, one of a successful episode / with positive reward)."""
    good: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for ep, st in _step_rows(episodes):
        row = {
            "prompt": st["messages"],
            "completion": _assistant(st["completion"]),
            "label": _desirable(ep, st),
        }
        (good if row["label"] else bad).append(row)
    rng = random.Random(seed)
    if good and bad and max_ratio > 0:
        small, large = sorted((good, bad), key=len)
        cap = max(1, round(len(small) * max_ratio))
        if len(large) > cap:
            keep = rng.sample(large, cap)
            if large is good:
                good = keep
            else:
                bad = keep
    rows = good + bad
    rng.shuffle(rows)
    return rows


def _state_key(st: dict[str, Any]) -> str:
    return hashlib.sha1(
        json.dumps(st["messages"], sort_keys=True).encode("utf-8")
    ).hexdigest()


def _step_score(st: dict[str, Any]) -> float:
    score = float(st.get("reward", 0.0))
    if not st.get("parsed"):
        score -= 1.0
    if st.get("expert_tool") is not None and st.get("tool") == st["expert_tool"]:
        score += 0.5
    return score


def build_dpo(
    episodes: list[dict[str, Any]], min_margin: float = 1e-6
) -> list[dict[str, Any]]:
    """Pairs of distinct completions at the same prompt; every better/worse
    combination of distinct completions whose scores differ by more than
    ``min_margin`` (score: step reward, -1 when unparsed, +0.5 when it is
    the expert's tool)."""
    groups: dict[str, dict[str, tuple[float, dict[str, Any]]]] = defaultdict(dict)
    for _ep, st in _step_rows(episodes):
        key = _state_key(st)
        comp = st["completion"]
        score = _step_score(st)
        prev = groups[key].get(comp)
        if prev is None or score > prev[0]:
            groups[key][comp] = (score, st)
    rows = []
    for by_comp in groups.values():
        items = sorted(by_comp.items(), key=lambda kv: -kv[1][0])
        for i, (c_hi, (s_hi, st)) in enumerate(items):
            for c_lo, (s_lo, _) in items[i + 1 :]:
                if s_hi - s_lo > min_margin:
                    rows.append(
                        {
                            "prompt": st["messages"],
                            "chosen": _assistant(c_hi),
                            "rejected": _assistant(c_lo),
                        }
                    )
    return rows


def build_grpo(
    episodes: list[dict[str, Any]], dedupe: bool = True
) -> list[dict[str, Any]]:
    rows, seen = [], set()
    for ep, st in _step_rows(episodes):
        if st.get("state") is None:
            continue
        key = _state_key(st) + json.dumps(st["state"].get("task"))
        if dedupe and key in seen:
            continue
        seen.add(key)
        rows.append(
            {
                "prompt": st["messages"],
                "env": ep["env"],
                "env_state": json.dumps(st["state"]),
                "valid_tools": list(st.get("valid_tools") or []),
                "expert_tool": st.get("expert_tool") or "",
                "task_id": ep.get("task_id", ""),
            }
        )
    return rows


def _step_at(
    traces: dict[str, list[dict[str, Any]]], pos: tuple[str, int, int]
) -> dict[str, Any]:
    return dict(traces[pos[0]][pos[1]]["steps"][pos[2]])


def manual_rows(
    method: str, traces: dict[str, list[dict[str, Any]]], labels: Resolved
) -> tuple[list[dict[str, Any]], set[tuple[str, int, int]]]:
    """Rows from manual labels, and the steps they cover (the env reward
    does not label those again)."""
    rows: list[dict[str, Any]] = []
    used: set[tuple[str, int, int]] = set()
    if method == "kto":
        for pos, good in sorted(labels.kto.items()):
            st = _step_at(traces, pos)
            rows.append(
                {
                    "prompt": st["messages"],
                    "completion": _assistant(st["completion"]),
                    "label": good,
                }
            )
            used.add(pos)
    elif method == "sft":
        for pos, answer in sorted(labels.sft.items()):
            st = _step_at(traces, pos)
            rows.append({"prompt": st["messages"], "completion": _assistant(answer)})
            used.add(pos)
        for pos, good in sorted(labels.kto.items()):
            used.add(pos)
            if good and pos not in labels.sft:
                st = _step_at(traces, pos)
                rows.append(
                    {
                        "prompt": st["messages"],
                        "completion": _assistant(st["completion"]),
                    }
                )
    elif method == "dpo":
        for better, worse in labels.dpo:
            hi, lo = _step_at(traces, better), _step_at(traces, worse)
            rows.append(
                {
                    "prompt": hi["messages"],
                    "chosen": _assistant(hi["completion"]),
                    "rejected": _assistant(lo["completion"]),
                }
            )
        for pos, answer in sorted(labels.sft.items()):
            st = _step_at(traces, pos)
            if answer.strip() != str(st["completion"]).strip():
                rows.append(
                    {
                        "prompt": st["messages"],
                        "chosen": _assistant(answer),
                        "rejected": _assistant(st["completion"]),
                    }
                )
    return rows, used


def _unlabelled(
    traces: dict[str, list[dict[str, Any]]], used: set[tuple[str, int, int]]
) -> list[dict[str, Any]]:
    """The episodes of ``traces`` without the steps in ``used``."""
    out = []
    for name, eps in traces.items():
        for e, ep in enumerate(eps):
            steps = ep.get("steps") or []
            keep = [st for t, st in enumerate(steps) if (name, e, t) not in used]
            out.append({**ep, "steps": keep} if len(keep) != len(steps) else ep)
    return out


def build_rows(
    method: str, episodes: list[dict[str, Any]], *, seed: int = 0, **kw: Any
) -> list[dict[str, Any]]:
    if method == "sft":
        return build_sft(episodes)
    if method == "kto":
        return build_kto(episodes, max_ratio=kw.get("kto_max_ratio", 1.0), seed=seed)
    if method == "dpo":
        return build_dpo(episodes)
    if method == "grpo":
        return build_grpo(episodes)
    raise ConfigError("method", f"method must be one of {', '.join(METHODS)}.")


def split(
    rows: list[T], validation_fraction: float = 0.1, seed: int = 0
) -> tuple[list[T], list[T]]:
    """Seeded shuffle, then the last ``validation_fraction`` is validation
    (at least one row when there are two or more rows and the fraction > 0)."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_val = round(len(rows) * validation_fraction)
    if validation_fraction > 0 and n_val == 0 and len(rows) >= 2:
        n_val = 1
    val_idx = set(order[len(order) - n_val :])
    train = [rows[i] for i in order if i not in val_idx]
    val = [rows[i] for i in order if i in val_idx]
    return train, val


def _text_len(value: Any) -> int:
    if isinstance(value, list):
        return sum(len(str(m.get("content", ""))) for m in value if isinstance(m, dict))
    return len(str(value))


def statistics(
    method: str, train: list[dict[str, Any]], val: list[dict[str, Any]]
) -> dict[str, Any]:
    rows = train + val
    out: dict[str, Any] = {
        "method": method,
        "rows": len(rows),
        "train": len(train),
        "validation": len(val),
    }
    if rows:
        plen = [_text_len(r["prompt"]) for r in rows]
        out["prompt_chars"] = {"mean": sum(plen) / len(plen), "max": max(plen)}
        ckey = {"sft": "completion", "kto": "completion", "dpo": "chosen"}.get(method)
        if ckey:
            clen = [_text_len(r[ckey]) for r in rows]
            out["completion_chars"] = {"mean": sum(clen) / len(clen), "max": max(clen)}
    if method == "kto":
        pos = sum(bool(r["label"]) for r in rows)
        out["desirable"] = pos
        out["undesirable"] = len(rows) - pos
        out["balance"] = pos / len(rows) if rows else 0.0
    if method == "grpo":
        out["states"] = len(rows)
        out["tasks"] = len({r.get("task_id") for r in rows})
    return out


def save_dataset(
    folder: Path,
    method: str,
    train: list[dict[str, Any]],
    val: list[dict[str, Any]],
    lines: tuple[list[str], list[str]] | None = None,
) -> dict[str, Any]:
    """Write JSONL, parquet (through the datasets library) and stats.json;
    ``lines`` are the rows of ``train`` and ``val`` as JSON already, when
    the caller has them (an import encodes each row to find duplicates)."""
    from datasets import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    train_lines, val_lines = lines or (
        [json.dumps(r, ensure_ascii=False) for r in train],
        [json.dumps(r, ensure_ascii=False) for r in val],
    )
    for name, rows, encoded in (
        ("train", train, train_lines),
        ("validation", val, val_lines),
    ):
        atomic_write_text(
            folder / f"{name}.jsonl", "".join(line + "\n" for line in encoded)
        )
        if rows:
            target = folder / f"{name}.parquet"
            tmp = temp_path(target)
            try:
                Dataset.from_list(rows).to_parquet(str(tmp))
                tmp.replace(target)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    stats = statistics(method, train, val)
    atomic_write_json(folder / "stats.json", stats)
    atomic_write_json(folder / "dataset.json", {"method": method, "format": 1})
    return stats


def load_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def dataset_files(path: str | Path) -> tuple[Path, Path | None]:
    """(train file, validation file or None) of a dataset folder or file.

    A folder holds ``train.jsonl`` (preferred) or ``train.parquet``, with an
    optional ``validation`` file of the same format; a file is the training
    set alone. The train file returned may not exist.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        return p, None
    for ext in (".jsonl", ".parquet"):
        train = p / f"train{ext}"
        if train.is_file():
            val = p / f"validation{ext}"
            return train, val if val.is_file() else None
    return p / "train.jsonl", None


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON Lines or parquet file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
        return rows
    return load_rows(path)


def load_split(
    folder: str | Path, method: str, field_name: str = "dataset"
) -> tuple[Any, Any]:
    """(train, validation or None) as ``datasets.Dataset`` for ``method``;
    ConfigError naming ``field_name`` when missing or with wrong columns."""
    from datasets import Dataset

    train_file, val_file = dataset_files(folder)
    if not train_file.is_file():
        raise ConfigError(
            field_name,
            f"Dataset {folder} does not exist; build it with llm.dataset first.",
        )
    check_columns(train_file, method, field_name)
    train = Dataset.from_list(read_rows(train_file))
    val = None
    if val_file is not None:
        rows = read_rows(val_file)
        val = Dataset.from_list(rows) if rows else None
    return train, val


def _first_row(train_file: Path, field_name: str) -> tuple[dict[str, Any] | None, int]:
    """The first row (None when empty) and the row count, reading parquet
    metadata or streaming JSON Lines without holding the file."""
    if train_file.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(train_file)
        except Exception as exc:  # pyarrow raises several types here
            raise ConfigError(
                field_name,
                f"Dataset {train_file} is not a readable parquet file "
                f"({type(exc).__name__}); write it again or use JSON Lines.",
            ) from None
        n = pf.metadata.num_rows
        if n == 0:
            return None, 0
        row: dict[str, Any] = next(pf.iter_batches(batch_size=1)).to_pylist()[0]
        return row, n
    n = 0
    first: dict[str, Any] | None = None
    with open(train_file, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if first is None:
                try:
                    first = json.loads(line)
                except json.JSONDecodeError:
                    raise ConfigError(
                        field_name,
                        f"Dataset {train_file} is not valid JSON Lines (line "
                        f"{lineno}); write one JSON object per line.",
                    ) from None
                if not isinstance(first, dict):
                    raise ConfigError(
                        field_name,
                        f"Dataset {train_file} does not hold JSON objects; "
                        "write one object per line, with the method's columns.",
                    )
            n += 1
    return first, n


def check_columns(train_file: Path, method: str, field_name: str = "dataset") -> int:
    """Raise ConfigError unless the first row has the method's columns;
    returns the number of rows. ``train_file`` is JSON Lines or parquet."""
    first, n = _first_row(train_file, field_name)
    if first is None:
        raise ConfigError(
            field_name,
            f"Dataset {train_file} has no rows; build it again from traces "
            "with llm.dataset.",
        )
    need = COLUMNS[method]
    missing = [c for c in need if c not in first]
    if missing:
        raise ConfigError(
            field_name,
            f"Dataset {train_file.parent.name} lacks the column(s) "
            f"{', '.join(missing)} that {method.upper()} needs (it has "
            f"{', '.join(sorted(first))}); build it with method {method!r}.",
        )
    return n


# ------------------------------------------------------------------ the job
@dataclass(frozen=True)
class DatasetConfig:
    """Settings of an ``llm.dataset`` job."""

    traces: Any = None
    """Trace files (JSON Lines from llm.collect): one path or a list."""
    method: str = setting("sft", choices=METHODS)
    """The format: grpo (prompts with env states to score answers), sft (good
    steps), kto (steps labelled good or bad) or dpo (better / worse answer
    pairs at the same state)."""
    validation_fraction: float = setting(
        0.1, min=0, max=1, exclusive_max=True, label="Validation split"
    )
    """Fraction of the rows held out for validation."""
    kto_max_ratio: float = setting(1.0, min=0, max=100, label="KTO class ratio")
    """KTO only: keep at most this many rows of the larger class per row of
    the smaller one (of the env-reward rows; manual labels are all kept);
    0 keeps all."""
    manual_labels: bool = setting(True, label="Use manual labels")
    """Rows from the labels set in the traces view first (good/bad, better
    of two, ideal answers), the env reward for the rest."""
    name: str | None = setting(None, check=checked_name)
    """Folder name under ``data/datasets/`` (None: method and run id)."""
    seed: int | None = setting(None, min=0, max=SEED_MAX)
    """Seed of the shuffle and the split (None: drawn and recorded)."""


def _trace_files(value: Any, project_dir: Path | None) -> list[Path]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        p = Path(str(item)).expanduser()
        if not p.is_absolute() and project_dir is not None:
            for cand in (project_dir / p, project_dir / "data" / "traces" / p):
                if cand.exists():
                    p = cand
                    break
        out.append(p)
    return out


def validate_dataset(config: Mapping[str, Any]) -> DatasetConfig:
    cfg = build(DatasetConfig, config, "llm.dataset")
    if not cfg.traces:
        raise ConfigError("traces", "traces must name one or more trace files.")
    return replace(cfg, seed=drawn_seed(cfg.seed))


def build_dataset(
    trace_files: list[Path],
    method: str,
    out_folder: Path,
    *,
    validation_fraction: float = 0.1,
    seed: int = 0,
    kto_max_ratio: float = 1.0,
    project_dir: Path | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Build and save a dataset; with ``project_dir`` (whose
    ``data/labels.sqlite`` exists) manual labels come first. ``progress``
    counts stages: each trace file read, the rows built, the files saved."""
    stages = len(trace_files) + 2

    def report(done: int, message: str) -> None:
        if progress is not None:
            progress(done, stages, message)

    traces: dict[str, list[dict[str, Any]]] = {}
    for i, f in enumerate(trace_files):
        if not f.is_file():
            raise ConfigError("traces", f"Trace file {f} does not exist.")
        report(i, f"reading {f.name}")
        traces.setdefault(f.stem, []).extend(iter_traces(f))
    report(len(trace_files), "building rows")
    manual: list[dict[str, Any]] = []
    orphans = 0
    used: set[tuple[str, int, int]] = set()
    if project_dir is not None and has_labels(project_dir):
        store = LabelStore(project_dir)
        try:
            resolved = resolve(store.labels(), traces)
        finally:
            store.close()
        orphans = resolved.orphans
        manual, used = manual_rows(method, traces, resolved)
    episodes = _unlabelled(traces, used)
    env_rows = build_rows(method, episodes, seed=seed, kto_max_ratio=kto_max_ratio)
    rows = manual + env_rows
    if not rows:
        hint = {
            "sft": "no episode succeeded with valid tools",
            "dpo": "no state was visited with two different completions",
            "kto": "the traces have no steps",
            "grpo": "the traces hold no env states",
        }[method]
        raise ConfigError(
            "traces", f"The traces give no {method.upper()} rows: {hint}."
        )
    train, val = split(rows, validation_fraction, seed)
    report(stages - 1, "saving")
    stats = save_dataset(out_folder, method, train, val)
    stats["episodes"] = sum(len(eps) for eps in traces.values())
    stats["manual_rows"] = len(manual)
    stats["env_rows"] = len(env_rows)
    stats["orphan_labels"] = orphans
    atomic_write_json(out_folder / "stats.json", stats)
    report(stages, "saved")
    return stats


@job_kind(
    "llm.dataset",
    check=validate_dataset,
    label="Dataset",
    group="data",
    progress_unit="stages",
)
def run_dataset(ctx: JobContext, cfg: DatasetConfig) -> dict[str, Any]:
    """Builds an SFT, KTO, DPO or GRPO dataset (JSONL + parquet) from traces."""
    assert cfg.seed is not None  # validate_dataset() draws one
    files = _trace_files(cfg.traces, Path(ctx.project_dir))
    name = cfg.name or f"{cfg.method}-{ctx.run_id}"
    folder = child(ctx.project_dir, "data/datasets", name, "name")
    stats = build_dataset(
        files,
        cfg.method,
        folder,
        validation_fraction=cfg.validation_fraction,
        seed=cfg.seed,
        kto_max_ratio=cfg.kto_max_ratio,
        project_dir=Path(ctx.project_dir) if cfg.manual_labels else None,
        progress=ctx.progress,
    )
    ctx.log(
        f"{cfg.method} dataset: {stats['train']} train, "
        f"{stats['validation']} validation rows; {stats['manual_rows']} from "
        f"manual labels, {stats['env_rows']} from the env reward"
    )
    if stats["orphan_labels"]:
        ctx.log(orphan_sentence(stats["orphan_labels"]))
    return {"dataset": str(folder), "method": cfg.method, "stats": stats}
