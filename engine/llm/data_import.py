"""Datasets of one's own: a file or a Hub dataset into the dataset folder the
four training methods read (:mod:`engine.llm.datasets`).

``llm.import`` (and ``rl-studio-engine data import SOURCE``) reads JSON
Lines, JSON, CSV and Parquet files, a dataset folder (``save_to_disk`` or
data files) and Hub datasets (through the ``datasets`` library, so
``HF_ENDPOINT``, ``HF_HOME``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` mean what
they mean for models). It

1. renames columns (``columns``: ``field=column`` pairs) and detects the
   format from the columns (:data:`FORMATS`): ``chat`` (``messages``;
   ShareGPT ``conversations`` of ``from``/``value`` turns too), ``alpaca``
   (``instruction``, ``input``, ``output``), ``prompt_completion``,
   ``preference`` (``prompt``, ``chosen``, ``rejected``) or ``kto``
   (``prompt``, ``completion``, ``label``);
2. checks each row, refusing the first bad one in one sentence naming the
   row (the n-th record, from 1) and the field;
3. turns rows into TRL's conversational rows of the method the format feeds
   (:data:`METHOD_OF`; chat, alpaca and prompt/completion rows can feed GRPO
   too, as prompts), drops exact duplicates, splits them (seeded, 90/10 by
   default) and writes them with :func:`engine.llm.datasets.save_dataset`
   into ``<project>/data/datasets/<name>/``: built in a temporary folder
   beside it and renamed into place, so a refused or failed import leaves
   nothing behind;
4. with a base model, measures token lengths with its tokenizer and chat
   template: mean, median, 95th percentile and maximum, and how many rows
   ``max_length`` would truncate (on a seeded sample of
   :data:`TOKEN_SAMPLE_ROWS` rows when there are more; ``stats.json`` says
   whether the count is exact).

:func:`preview` maps the first rows and lists their problems without
raising: it reads only those rows, so it is fast on any size of file.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import random
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import contract
from engine.errors import ConfigError, EngineError, quoted
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.llm.datasets import DatasetConfig, save_dataset, split
from engine.llm.train import METHODS, TrainConfig
from engine.settings import build, same_setting, setting
from engine.store.atomic import atomic_write_json
from engine.store.paths import checked_name, child

KIND = "llm.import"

FORMATS: dict[str, tuple[str, ...]] = {
    "chat": ("messages",),
    "alpaca": ("instruction", "output"),
    "prompt_completion": ("prompt", "completion"),
    "preference": ("prompt", "chosen", "rejected"),
    "kto": ("prompt", "completion", "label"),
}
"""Each format and the fields its rows need (alpaca rows may add ``input``
and ``system``), in the order :func:`detect_format` tries them."""

DETECT_ORDER = ("chat", "preference", "kto", "alpaca", "prompt_completion")
"""The most specific formats first: a preference row also has a prompt."""

METHOD_OF = {
    "chat": "sft",
    "alpaca": "sft",
    "prompt_completion": "sft",
    "preference": "dpo",
    "kto": "kto",
}
"""The training method a format feeds when the import names none."""

PROMPT_FORMATS = ("chat", "alpaca", "prompt_completion")
"""Formats whose prompts can feed GRPO (which writes its own answers)."""

FILE_TYPES = (".jsonl", ".json", ".csv", ".parquet")

MAX_ROW_CHARS = 1_000_000
"""The most characters one row may hold: a row past it is almost always a
file read with the wrong format (a whole document in one cell), and would be
cut to ``max_length`` tokens anyway."""

TOKEN_SAMPLE_ROWS = 2_000
"""Rows measured with the tokenizer (seeded sample when there are more):
tokenizing costs about 0.1 ms a row, too slow for every row of a large set."""

PREVIEW_ROWS = 20

DATASETS_FOLDER = contract.DATASETS_FOLDER

FIELDS_READ = frozenset(
    {"system", "input", *(f for fields in FORMATS.values() for f in fields)}
)
"""Every field a format reads: the others are extra columns."""

ROLES = ("system", "user", "assistant", "tool")
_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}


@dataclass(frozen=True)
class ImportConfig:
    """Settings of an ``llm.import`` job."""

    source: str = setting("")
    """A file (.jsonl, .json, .csv or .parquet), a dataset folder, or a Hub
    dataset id (``org/name``)."""
    format: str = setting("auto", choices=("auto", *FORMATS))
    """The rows' format: chat (messages), alpaca (instruction, input,
    output), prompt_completion, preference (prompt, chosen, rejected) or kto
    (prompt, completion, label); auto detects it from the columns."""
    columns: str = setting("", label="Column mapping")
    """Columns to read under another name, as ``field=column`` pairs
    separated by commas (``messages=conversations, output=response``)."""
    method: str | None = setting(None, choices=METHODS)
    """The training method the dataset is for (None: the format's: sft for
    chat, alpaca and prompt_completion, dpo for preference, kto for kto;
    grpo takes the prompts of the first three)."""
    split_name: str = setting("train", label="Hub split")
    """The split of a Hub dataset or dataset folder to read."""
    name: str | None = setting(None, check=checked_name)
    """Folder name under ``data/datasets/`` (None: the source's name)."""
    validation_fraction: float = same_setting(DatasetConfig, "validation_fraction")
    seed: int = setting(0, min=0, max=2**31 - 1)
    """Seed of the shuffle before the split (the same seed, the same split)."""
    base_model: str = setting("", picker="base_model")
    """A base model whose tokenizer and chat template measure the rows'
    token lengths (empty: no token statistics)."""
    max_length: int = same_setting(TrainConfig, "max_length")


def parse_columns(text: str, field_name: str = "columns") -> dict[str, str]:
    """``{"messages": "conversations"}`` from ``"messages=conversations"``."""
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        field, sep, column = part.partition("=")
        field, column = field.strip(), column.strip()
        if not sep or not field or not column:
            raise ConfigError(
                field_name,
                f"The column mapping {quoted(part)} must read field=column "
                "(e.g. output=response).",
            )
        out[field] = column
    return out


def is_hub_id(source: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", source)) and not Path(source).exists()


def validate_import(config: Mapping[str, Any]) -> ImportConfig:
    cfg = build(ImportConfig, config, KIND)
    if not cfg.source.strip():
        raise ConfigError(
            "source", "source must name a data file, a folder or a Hub dataset id."
        )
    parse_columns(cfg.columns)
    path = Path(cfg.source).expanduser()
    if not is_hub_id(cfg.source):
        if not path.exists():
            raise ConfigError(
                "source",
                f"{cfg.source} does not exist; give a data file, a folder or a Hub "
                "dataset id (org/name).",
            )
        if path.is_dir() and not _holds_dataset(path):
            raise ConfigError(
                "source",
                f"The folder {path} holds no dataset (a datasets save_to_disk "
                f"folder, or {', '.join(FILE_TYPES)} files); give one of its files "
                "or such a folder.",
            )
        if path.is_file() and path.suffix.lower() not in FILE_TYPES:
            raise ConfigError(
                "source",
                f"{path.name} is not a file type that can be imported; use "
                f"{', '.join(FILE_TYPES)}.",
            )
        cfg = replace(cfg, source=str(path.resolve()))
    if cfg.method is not None and cfg.format != "auto":
        _check_method(cfg.format, cfg.method)
    if not is_hub_id(cfg.source):
        # The first rows say at once what no later row can fix (an empty
        # file, another format than declared, no format at all): refused
        # before a run is made. A Hub dataset is read by the job only.
        try:
            preview(
                cfg.source,
                cfg.format,
                cfg.columns,
                cfg.method,
                PREVIEW_ROWS,
                cfg.split_name,
            )
        except ConfigError:
            raise
        except EngineError as exc:
            raise ConfigError("source", str(exc)) from None
    return cfg


def _holds_dataset(folder: Path) -> bool:
    """Whether ``folder`` is a saved dataset or holds data files (the
    ``datasets`` library reads the files of any folder it is given, so a
    home folder would be scanned whole)."""
    if (folder / "dataset_info.json").is_file() or (
        folder / "dataset_dict.json"
    ).is_file():
        return True
    return any(
        p.suffix.lower() in FILE_TYPES for p in itertools.islice(folder.iterdir(), 1000)
    )


def _check_method(fmt: str, method: str) -> None:
    fits = METHOD_OF[fmt] == method or (method == "grpo" and fmt in PROMPT_FORMATS)
    if not fits:
        raise ConfigError(
            "method",
            f"{fmt} rows cannot train {method.upper()}; they feed "
            f"{METHOD_OF[fmt].upper()}"
            + (" or GRPO" if fmt in PROMPT_FORMATS else "")
            + ".",
        )


# ------------------------------------------------------------ reading rows
class RowError(EngineError):
    """A row that cannot be imported, in one sentence naming it."""


def _decode_problem(data: bytes, exc: UnicodeDecodeError, where: str) -> EngineError:
    line = data.count(b"\n", 0, exc.start) + 1
    return EngineError(
        f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
        "save it as UTF-8 and import it again."
    )


def _too_large(n: int, chars: int) -> RowError:
    return RowError(
        f"Row {n} holds {chars / 1e6:.1f} million characters, over the "
        f"{MAX_ROW_CHARS / 1e6:g} million a row may hold; check that the file's "
        "rows are split as its format says."
    )


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as fh:
        n = 0
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            n += 1
            if len(raw) > MAX_ROW_CHARS:
                raise _too_large(n, len(raw))
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise EngineError(
                    f"{path.name} is not UTF-8 text (byte 0x{raw[exc.start]:02x} on "
                    f"line {lineno}); save it as UTF-8 and import it again."
                ) from None
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                raise EngineError(
                    f"Line {lineno} of {path.name} is not JSON; JSON Lines files "
                    "hold one JSON object per line."
                ) from None
            if not isinstance(row, dict):
                raise EngineError(
                    f"Line {lineno} of {path.name} is not a JSON object; JSON Lines "
                    "files hold one object per line."
                )
            yield row


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _decode_problem(data, exc, path.name) from None


def _json_rows(path: Path) -> Iterator[dict[str, Any]]:
    try:
        data = json.loads(_read_text(path)) if path.stat().st_size else []
    except json.JSONDecodeError as exc:
        raise EngineError(
            f"{path.name} is not valid JSON (line {exc.lineno}); a .json file "
            "holds a list of row objects (use .jsonl for one object per line)."
        ) from None
    if isinstance(data, dict):
        # {"train": [...]} or {"data": [...]}: the one list of rows inside.
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(lists) == 1 else None
    if not isinstance(data, list):
        raise EngineError(
            f"{path.name} does not hold a list of rows; a .json file holds a "
            "list of row objects."
        )
    for n, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise RowError(f"Row {n} of {path.name} is not a JSON object.")
        yield row


def _cell(value: str) -> Any:
    """A CSV cell: JSON when it holds a list or an object (chat messages)."""
    text = value.strip()
    if text[:1] in ("[", "{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return value
    return value


def _csv_rows(path: Path) -> Iterator[dict[str, Any]]:
    text = _read_text(path)
    # A cell may be as long as a row; the csv module's own cap is 128 KB.
    csv.field_size_limit(MAX_ROW_CHARS + 1)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    n = 0
    try:
        for row in reader:
            n += 1
            if None in row:
                raise RowError(
                    f"Row {n} of {path.name} has more cells than the header has "
                    "columns."
                )
            chars = sum(len(v or "") for v in row.values())
            if chars > MAX_ROW_CHARS:
                raise _too_large(n, chars)
            yield {k: _cell(v) for k, v in row.items() if v is not None}
    except csv.Error as exc:
        if "field larger" in str(exc):
            raise _too_large(n + 1, MAX_ROW_CHARS + 1) from None
        raise EngineError(
            f"Row {n + 1} of {path.name} is not valid CSV ({exc})."
        ) from None


def _parquet_rows(path: Path, limit: int | None) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types here
        raise EngineError(
            f"{path.name} is not a readable Parquet file ({type(exc).__name__})."
        ) from None
    n = 0
    for batch in pf.iter_batches(batch_size=min(limit or 8192, 8192)):
        for row in batch.to_pylist():
            n += 1
            yield row
            if limit is not None and n >= limit:
                return


def _hub_rows(source: str, split_name: str) -> Iterator[dict[str, Any]]:
    """Rows of a Hub dataset or a dataset folder, through ``datasets``."""
    import datasets

    folder = Path(source).expanduser()
    try:
        if folder.is_dir() and (
            (folder / "dataset_info.json").is_file()
            or (folder / "dataset_dict.json").is_file()
        ):
            loaded: Any = datasets.load_from_disk(str(folder))
            if isinstance(loaded, datasets.DatasetDict):
                loaded = loaded[split_name]
        else:
            loaded = datasets.load_dataset(source, split=split_name)
    except KeyError:
        raise EngineError(
            f"The dataset {source} has no split {quoted(split_name)}."
        ) from None
    except Exception as exc:  # the library raises many types for one cause
        raise EngineError(_hub_problem(source, split_name, exc)) from None
    yield from loaded


def _hub_problem(source: str, split_name: str, exc: Exception) -> str:
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else name
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if "NotFound" in name or "doesn't exist" in text or "404" in text:
        return (
            f"The Hub dataset {source} was not found at {endpoint}; check the id "
            "(org/name), or HF_TOKEN for a private one."
        )
    if "split" in text.lower() and split_name in text:
        return f"The dataset {source} has no split {quoted(split_name)}."
    if isinstance(exc, ConnectionError) or "offline" in text.lower():
        return (
            f"The Hub dataset {source} could not be reached at {endpoint} and is "
            f"not in the local cache ({text})."
        )
    return f"The dataset {source} could not be read ({name}: {text})."


def read_rows(
    source: str, split_name: str = "train", limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """The raw rows of ``source``, the first ``limit`` of them (all: None)."""
    path = Path(source).expanduser()
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            rows = _parquet_rows(path, limit)
        elif suffix == ".csv":
            rows = _csv_rows(path)
        elif suffix == ".json":
            rows = _json_rows(path)
        else:
            rows = _jsonl_rows(path)
    else:
        rows = _hub_rows(source, split_name)
    for n, row in enumerate(rows, 1):
        if limit is not None and n > limit:
            return
        yield row


# --------------------------------------------------------- formats and rows
def detect_format(columns: set[str]) -> str | None:
    for fmt in DETECT_ORDER:
        if set(FORMATS[fmt]) <= columns:
            return fmt
    return None


def _format_problem(columns: set[str], where: str) -> str:
    lines = "; ".join(f"{f}: {', '.join(c)}" for f, c in FORMATS.items())
    return (
        f"{where} has the columns {', '.join(sorted(columns)) or '(none)'}, which "
        f"match no format ({lines}); map yours with columns field=column."
    )


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _messages(n: int, field: str, value: Any) -> list[dict[str, str]]:
    """A message list of a row (text: one user message)."""
    if isinstance(value, str):
        if not value.strip():
            raise RowError(f"Row {n}'s {field} is empty.")
        role = "assistant" if field != "prompt" else "user"
        return [{"role": role, "content": value}]
    if not isinstance(value, list) or not value:
        raise RowError(
            f"Row {n}'s {field} is neither text nor a list of messages "
            f"({quoted(value)})."
        )
    out = []
    for i, msg in enumerate(value, 1):
        if (
            type(msg) is dict
            and len(msg) == 2
            and msg.get("role") in ROLES
            and type(msg.get("content")) is str
        ):
            out.append(msg)  # already {role, content}: the common case, kept
            continue
        if isinstance(msg, dict) and "from" in msg and "role" not in msg:
            msg = {
                "role": _SHAREGPT_ROLES.get(msg["from"]),
                "content": msg.get("value"),
            }
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            raise RowError(
                f"Row {n}'s {field} message {i} has no role "
                f"({', '.join(ROLES)}): {quoted(msg)}."
            )
        content = msg.get("content")
        if not isinstance(content, str):
            raise RowError(f"Row {n}'s {field} message {i} has no text content.")
        out.append({"role": str(msg["role"]), "content": content})
    return out


def _label(n: int, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "good", "desirable"):
        return True
    if text in ("false", "0", "no", "bad", "undesirable"):
        return False
    raise RowError(f"Row {n}'s label must be true or false, not {quoted(value)}.")


def convert(n: int, row: Mapping[str, Any], fmt: str, method: str) -> dict[str, Any]:
    """Row ``n`` (from 1) of format ``fmt`` as a row of ``method``'s dataset
    (:data:`engine.llm.datasets.COLUMNS`); RowError naming row and field."""
    need = FORMATS[fmt]
    if method == "grpo":
        need = need[:1] if fmt != "alpaca" else ("instruction",)
        # The other columns go with the prompt to the reward functions
        # (``tests`` for code execution, an env and its state for env_reward).
        extra = {k: v for k, v in row.items() if k not in FIELDS_READ}
        return {**_converted(n, row, fmt, method, need), **extra}
    return _converted(n, row, fmt, method, need)


def _converted(
    n: int, row: Mapping[str, Any], fmt: str, method: str, need: tuple[str, ...]
) -> dict[str, Any]:
    for field in need:
        value = row.get(field)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise RowError(
                f"Row {n} has no {field} ({fmt} rows need {', '.join(need)})."
            )
    if fmt == "chat":
        msgs = _messages(n, "messages", row["messages"])
        if method == "grpo":
            while msgs and msgs[-1]["role"] == "assistant":
                msgs = msgs[:-1]
            if not msgs:
                raise RowError(f"Row {n}'s messages hold no prompt before the answer.")
            return _grpo_row(msgs)
        if msgs[-1]["role"] != "assistant" or len(msgs) < 2:
            raise RowError(
                f"Row {n}'s messages must end with an assistant answer after at "
                "least one other message."
            )
        return {"prompt": msgs[:-1], "completion": msgs[-1:]}
    if fmt == "alpaca":
        prompt: list[dict[str, str]] = []
        if _text(row.get("system")):
            prompt.append({"role": "system", "content": str(row["system"])})
        user = str(row["instruction"])
        if _text(row.get("input")):
            user += "\n\n" + str(row["input"])
        prompt.append({"role": "user", "content": user})
        if method == "grpo":
            return _grpo_row(prompt)
        return {"prompt": prompt, "completion": _messages(n, "output", row["output"])}
    prompt = _messages(n, "prompt", row["prompt"])
    if method == "grpo":
        return _grpo_row(prompt)
    if fmt == "prompt_completion":
        return {
            "prompt": prompt,
            "completion": _messages(n, "completion", row["completion"]),
        }
    if fmt == "kto":
        return {
            "prompt": prompt,
            "completion": _messages(n, "completion", row["completion"]),
            "label": _label(n, row["label"]),
        }
    chosen = _messages(n, "chosen", row["chosen"])
    rejected = _messages(n, "rejected", row["rejected"])
    if chosen == rejected:
        raise RowError(
            f"Row {n}'s chosen and rejected answers are the same, so it prefers "
            "nothing; drop the row or fix one answer."
        )
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def _grpo_row(prompt: list[dict[str, str]]) -> dict[str, Any]:
    """A GRPO prompt with no env: rewards that score the answer alone
    (format, code, judge, learned) apply, the env's cannot."""
    return {
        "prompt": prompt,
        "env": "",
        "env_state": "",
        "valid_tools": [],
        "expert_tool": "",
    }


@dataclass
class Mapped:
    """Rows of a source, renamed, checked and converted."""

    format: str
    method: str
    rows: list[dict[str, Any]]
    lines: list[str]
    """Each row as its JSON line."""
    read: int
    """Rows read (before duplicates were dropped)."""
    duplicates: int
    columns: list[str]
    """The source's columns (the first row's), before renaming."""


ALIASES = {"conversations": "messages"}
"""Column names read as a field when the row lacks the field and no mapping
names it (ShareGPT's ``conversations``)."""


def _renamed(row: Mapping[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    if not mapping:
        out = dict(row)
        for column, field in ALIASES.items():
            if column in out and field not in out:
                out[field] = out.pop(column)
        return out
    out = {k: v for k, v in row.items() if k not in mapping.values()}
    for field, column in mapping.items():
        if column in row:
            out[field] = row[column]
    return out


def _row_format(
    n: int, row: Mapping[str, Any], declared: str, first: str | None
) -> str:
    """The format of row ``n``: the declared one (checked), else detected."""
    columns = set(row)
    if declared != "auto":
        missing = [c for c in FORMATS[declared] if c not in columns]
        if missing and n == 1:
            found = detect_format(columns)
            raise EngineError(
                f"The rows are not {declared} rows: they lack "
                f"{', '.join(missing)}"
                + (f" and look like {found} rows" if found else "")
                + "; give the right format or map the columns."
            )
        return declared
    found = detect_format(columns)
    if found is None:
        if first is not None:
            return first  # its missing field is named by convert()
        raise EngineError(_format_problem(columns, f"Row {n}"))
    if first is not None and found != first:
        raise RowError(
            f"Row {n} is in the {found} format but the rows before it are in the "
            f"{first} format; a dataset holds one format."
        )
    return found


def map_rows(
    raw: Iterator[dict[str, Any]],
    fmt: str = "auto",
    mapping: Mapping[str, str] | None = None,
    method: str | None = None,
    *,
    collect_problems: bool = False,
    source_name: str = "The source",
) -> tuple[Mapped, list[str]]:
    """Check and convert rows; the first problem raises, or with
    ``collect_problems`` each bad row is left out and its sentence listed."""
    mapping = mapping or {}
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    problems: list[str] = []
    first: str | None = None
    columns: list[str] = []
    n = 0
    duplicates = 0
    chosen_method = method
    for n, source_row in enumerate(raw, 1):
        if n == 1:
            columns = list(source_row)
        row = _renamed(source_row, mapping)
        try:
            row_fmt = _row_format(n, row, fmt, first)
            if first is None:
                first = row_fmt
                if chosen_method is None:
                    chosen_method = METHOD_OF[row_fmt]
                else:
                    _check_method(row_fmt, chosen_method)
            assert chosen_method is not None
            out = convert(n, row, row_fmt, chosen_method)
        except RowError as exc:
            if not collect_problems:
                raise
            problems.append(str(exc))
            continue
        # The row's JSON line finds duplicates, and is what gets written.
        line = json.dumps(out, ensure_ascii=False)
        if line in seen:
            duplicates += 1
            continue
        seen.add(line)
        rows.append(out)
        lines.append(line)
    if n == 0:
        raise EngineError(f"{source_name} has no rows; there is nothing to import.")
    assert first is not None and chosen_method is not None
    mapped = Mapped(first, chosen_method, rows, lines, n, duplicates, columns)
    return mapped, problems


def _shown(source: str) -> str:
    return Path(source).name if Path(source).is_file() else source


def preview(
    source: str,
    fmt: str = "auto",
    columns: str = "",
    method: str | None = None,
    rows: int = PREVIEW_ROWS,
    split_name: str = "train",
) -> dict[str, Any]:
    """The first ``rows`` rows mapped, the detected format and the method it
    feeds, the source's columns, and one sentence per bad row among them
    (bad rows are left out of ``rows``). Reads only those rows."""
    mapped, problems = map_rows(
        read_rows(source, split_name, limit=rows),
        fmt,
        parse_columns(columns),
        method,
        collect_problems=True,
        source_name=_shown(source),
    )
    return {
        "format": mapped.format,
        "method": mapped.method,
        "columns": mapped.columns,
        "rows": mapped.rows,
        "problems": problems,
    }


# ------------------------------------------------------------ token lengths
def token_statistics(
    rows: list[dict[str, Any]],
    method: str,
    base_model: str,
    max_length: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Token lengths of the rows as the base model's tokenizer and chat
    template make them (prompt and answer together; DPO's longer answer;
    GRPO's prompt with the generation prompt)."""
    from transformers import AutoTokenizer

    from engine.llm.base import check_chat_template, inspect_model

    info = inspect_model(base_model, "base_model")
    check_chat_template(info, "base_model")
    tokenizer = AutoTokenizer.from_pretrained(info.path)
    sample = rows
    if len(rows) > TOKEN_SAMPLE_ROWS:
        sample = random.Random(seed).sample(rows, TOKEN_SAMPLE_ROWS)

    def conversations(row: dict[str, Any]) -> list[list[dict[str, str]]]:
        if method == "grpo":
            return [row["prompt"]]
        if method == "dpo":
            return [row["prompt"] + row["chosen"], row["prompt"] + row["rejected"]]
        return [row["prompt"] + row["completion"]]

    texts: list[str] = []
    owners: list[int] = []
    for i, row in enumerate(sample):
        for conv in conversations(row):
            text = tokenizer.apply_chat_template(
                conv, tokenize=False, add_generation_prompt=method == "grpo"
            )
            texts.append(str(text))
            owners.append(i)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    lengths = [0] * len(sample)
    for i, tokens in zip(owners, ids, strict=True):
        lengths[i] = max(lengths[i], len(tokens))
    ordered = sorted(lengths)
    over = sum(1 for n in lengths if n > max_length)
    exact = len(sample) == len(rows)
    return {
        "base_model": str(info.path),
        "max_length": max_length,
        "measured_rows": len(sample),
        "mean": sum(lengths) / len(lengths),
        "p50": ordered[len(ordered) // 2],
        "p95": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        "max": ordered[-1],
        "truncated": over if exact else round(over / len(sample) * len(rows)),
        "truncated_exact": exact,
    }


# ---------------------------------------------------------------- the job
def default_name(source: str) -> str:
    """A dataset folder name from the source (``org/name`` -> ``name``)."""
    stem = (
        Path(source.rstrip("/")).stem
        if not is_hub_id(source)
        else source.split("/")[-1]
    )
    name = re.sub(r"[^\w.-]+", "-", stem).strip(".-") or "imported"
    return name[:64]


def import_dataset(
    cfg: ImportConfig, project_dir: Path, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Read, check, convert, split and write ``cfg``'s dataset into
    ``project_dir/data/datasets/<name>``; the job's summary. Nothing is left
    behind on failure."""
    say = log or (lambda _text: None)
    mapped, _ = map_rows(
        read_rows(cfg.source, cfg.split_name),
        cfg.format,
        parse_columns(cfg.columns),
        cfg.method,
        source_name=_shown(cfg.source),
    )
    say(
        f"{mapped.read} {mapped.format} rows read from {cfg.source}; "
        f"{mapped.duplicates} duplicates dropped; for {mapped.method.upper()}"
    )
    train_at, val_at = split(
        list(range(len(mapped.rows))), cfg.validation_fraction, cfg.seed
    )
    tokens = None
    if cfg.base_model:
        tokens = token_statistics(
            mapped.rows, mapped.method, cfg.base_model, cfg.max_length, cfg.seed
        )
        say(
            f"Tokens per row ({Path(tokens['base_model']).name}): mean "
            f"{tokens['mean']:.0f}, median {tokens['p50']}, 95th percentile "
            f"{tokens['p95']}, max {tokens['max']}; "
            f"{'' if tokens['truncated_exact'] else 'about '}{tokens['truncated']} "
            f"rows over max_length {cfg.max_length} would be truncated"
        )
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()  # save_dataset's parquet bar: the run logs instead
    name = cfg.name or default_name(cfg.source)
    folder = child(project_dir, DATASETS_FOLDER, name, "name")
    datasets_dir = folder.parent
    datasets_dir.mkdir(parents=True, exist_ok=True)
    # Built beside its place and renamed in: a failure leaves no half dataset.
    tmp = datasets_dir / f".import-{uuid.uuid4().hex[:8]}"
    old = datasets_dir / f".replaced-{uuid.uuid4().hex[:8]}"
    try:
        stats = save_dataset(
            tmp,
            mapped.method,
            [mapped.rows[i] for i in train_at],
            [mapped.rows[i] for i in val_at],
            ([mapped.lines[i] for i in train_at], [mapped.lines[i] for i in val_at]),
        )
        stats.update(
            {
                "source": cfg.source,
                "format": mapped.format,
                "rows_read": mapped.read,
                "duplicates": mapped.duplicates,
                "seed": cfg.seed,
                "tokens": tokens,
            }
        )
        atomic_write_json(tmp / "stats.json", stats)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return {
        "dataset": str(folder),
        "method": mapped.method,
        "format": mapped.format,
        "stats": stats,
    }


@job_kind(
    KIND,
    check=validate_import,
    label="Dataset import",
    group="data",
    progress_unit="items",
)
def run_import(ctx: JobContext, cfg: ImportConfig) -> dict[str, Any]:
    """Imports a JSONL, JSON, CSV, Parquet or Hub dataset (chat, alpaca,
    prompt/completion, preference or KTO rows) as a training dataset."""
    summary = import_dataset(cfg, Path(ctx.project_dir), log=ctx.log)
    stats = summary["stats"]
    ctx.progress(stats["rows"], stats["rows"])
    ctx.log(
        f"{summary['method']} dataset {Path(summary['dataset']).name}: "
        f"{stats['train']} train, {stats['validation']} validation rows"
    )
    return summary
