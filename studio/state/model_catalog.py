"""The model manager's view of the project's models. Qt-free.

Builds the table's records from the registered models (with the details of
SB3 zips read without torch) and from an Ollama server's ``/api/tags`` list,
and lays out a model's lineage as one chain: env → run → adapter → merged →
GGUF → Ollama name. Ancestry comes from the engine's ``model.lineage``
links; descendants from the runs whose config names the model as a parent.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import contract
from studio.state.sb3_zip import Sb3Info, Sb3ZipError, read_sb3_zip

OLLAMA_PREFIX = "ollama:"
KIND_LABELS = {
    "sb3-policy": "SB3 policy",
    "lora-adapter": "LoRA adapter",
    "hf-merged": "merged model",
    "hf-model": "base model",
    "gguf": "GGUF",
    "onnx": "ONNX",
    "ollama": "Ollama",
    "ollama-bundle": "Ollama bundle",
}
KEY_METRICS = (
    "eval/mean_reward",
    "eval/success_rate",
    "success_rate",
    "best_eval_reward",
    "rollout/ep_rew_mean",
    "reward_mean",
    "train_loss",
    "max_abs_diff",
    "size_mb",
)

_sb3_cache: dict[tuple[str, float], Sb3Info | str] = {}


def sb3_info(path: str) -> Sb3Info | str:
    """The zip's facts, or one sentence saying why they cannot be read.
    Cached by path and modification time."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return f"The policy file {path} does not exist."
    key = (path, mtime)
    if key not in _sb3_cache:
        try:
            _sb3_cache[key] = read_sb3_zip(path)
        except Sb3ZipError as exc:
            _sb3_cache[key] = str(exc)
    return _sb3_cache[key]


def key_metric(model: Mapping[str, Any]) -> str:
    metrics = model.get("metrics") or {}
    for name in KEY_METRICS:
        value = metrics.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{name} {value:.4g}"
    for name, value in metrics.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{name} {value:.4g}"
    return ""


def model_record(model: Mapping[str, Any]) -> dict[str, Any]:
    """A registered model as a table record (SB3 details filled in)."""
    record = dict(model)
    record.setdefault("metrics", {})
    if record.get("kind") == "sb3-policy" and str(record.get("path", "")).endswith(
        ".zip"
    ):
        info = sb3_info(str(record["path"]))
        if isinstance(info, Sb3Info):
            record["sb3"] = info.to_dict()
            if not record.get("algo"):
                record["algo"] = info.algo
            record.setdefault("timesteps", info.num_timesteps)
        else:
            record["sb3_error"] = info
    return record


def _parse_time(text: str) -> float:
    if not text:
        return 0.0
    # Ollama writes nanoseconds and a zone: 2024-05-01T10:11:12.123456789-07:00.
    head, _, rest = text.partition(".")
    zone = ""
    for sep in ("+", "-", "Z"):
        if sep in rest:
            zone = rest[rest.index(sep) :]
            break
    try:
        stamp = _dt.datetime.fromisoformat(head + (zone.replace("Z", "+00:00")))
    except ValueError:
        return 0.0
    return stamp.timestamp()


def on_server(model: Mapping[str, Any]) -> bool:
    """A record of an Ollama server's list (not a project model: a deployed
    model the project registered is kind ``ollama`` too, with its own id)."""
    return str(model.get("id", "")).startswith(OLLAMA_PREFIX)


def ollama_ref(model: Mapping[str, Any]) -> tuple[str, str]:
    """(Ollama name, server) of an ``ollama`` record: a server's entry or a
    registered deployment (whose metrics hold both)."""
    metrics = model.get("metrics") or {}
    name = str(metrics.get("ollama_model") or model.get("name", ""))
    return name, str(model.get("host") or metrics.get("host") or "")


def ollama_record(entry: Mapping[str, Any], host: str) -> dict[str, Any]:
    """One ``/api/tags`` entry as a table record."""
    details = entry.get("details") or {}
    name = str(entry.get("name") or entry.get("model") or "?")
    base = " ".join(
        str(details[k])
        for k in ("family", "parameter_size", "quantization_level")
        if details.get(k)
    )
    return {
        "id": OLLAMA_PREFIX + name,
        "name": name,
        "kind": "ollama",
        "path": "",
        "env": "",
        "algo": "",
        "base": base,
        "metrics": {},
        "size_bytes": int(entry.get("size") or 0),
        "created": _parse_time(str(entry.get("modified_at") or "")),
        "source_run": None,
        "host": host,
        "digest": str(entry.get("digest", "")),
        "details": dict(details),
    }


ON_SERVER = "on server"
NOT_ON_SERVER = "not on server"


def _host_key(host: str) -> str:
    """A server address as the engine's Ollama client spells it (scheme
    added, no trailing slash), to compare addresses written differently."""
    host = host.strip().rstrip("/").lower()
    return host if "://" in host else "http://" + host


def _name_key(name: str) -> str:
    """An Ollama name without the implied ``:latest`` tag."""
    return name.removesuffix(":latest")


def table_records(
    models: Iterable[Mapping[str, Any]],
    ollama: Iterable[Mapping[str, Any]] = (),
    listed_host: str | None = None,
) -> list[dict[str, Any]]:
    """One row per model: the registered models, then the server's entries
    (``ollama_record``) that are not deployments the project registered.

    A registered deployment whose server entry is listed (same Ollama name,
    same server) takes that entry's live facts (size, digest, details) and
    ``server_status`` "on server"; when ``listed_host`` is the server it was
    deployed to (that server answered with ``ollama``) and the entry is not
    there, its ``server_status`` is "not on server". Unknown otherwise."""
    server = {
        (_host_key(str(o.get("host") or "")), _name_key(str(o["name"]))): dict(o)
        for o in ollama
    }
    listed = _host_key(listed_host) if listed_host is not None else None
    matched: set[tuple[str, str]] = set()
    out = []
    for m in models:
        record = model_record(m)
        if record.get("kind") == "ollama" and not on_server(record):
            name, host = ollama_ref(record)
            key = (_host_key(host), _name_key(name))
            entry = server.get(key)
            if entry is not None:
                matched.add(key)
                record.update(
                    {k: entry[k] for k in ("size_bytes", "digest", "details")}
                )
                record["base"] = record.get("base") or entry["base"]
                record["server_status"] = ON_SERVER
            elif listed is not None and key[0] == listed:
                record["server_status"] = NOT_ON_SERVER
            record["host"] = host
        out.append(record)
    return out + [o for key, o in server.items() if key not in matched]


def server_status(model: Mapping[str, Any]) -> str:
    """Whether a registered deployment is on its server ("on server", "not
    on server"), "" when unknown or not a deployment."""
    return str(model.get("server_status") or "")


# ------------------------------------------------------------------ reports
def evaluation_reports(runs: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(title, report file) of every before/after evaluation report of the
    project's runs, newest run first: those of completed ``llm.evaluate``
    runs, and those the Evaluate nodes of flow runs made (whatever became of
    the nodes after them). A report a later flow run reused from the cache
    is listed once, under the run that made it. Files that are gone are
    left out."""
    found: dict[str, str] = {}
    ordered = sorted(runs, key=lambda r: float(r.get("created") or 0.0))
    for run in ordered:
        title = str(run.get("name") or run.get("id", ""))
        summary = run.get("summary") or {}
        if run.get("kind") == "llm.evaluate":
            if run.get("status") != "completed":
                continue
            path = summary.get("report") or str(
                Path(run.get("run_dir") or "") / contract.REPORT_FILE
            )
            found.setdefault(str(path), title)
        elif run.get("kind") == "flow.run":
            for node_id, state in (summary.get("nodes") or {}).items():
                if state.get("state") != "done":
                    continue
                for value in (state.get("outputs") or {}).values():
                    if isinstance(value, Mapping) and value.get("report_file"):
                        found.setdefault(
                            str(value["report_file"]), f"{title} · {node_id}"
                        )
    listed = [(title, path) for path, title in found.items() if Path(path).is_file()]
    return listed[::-1]


# ------------------------------------------------------------------ lineage
@dataclass(frozen=True)
class ChainNode:
    """One box of the lineage chain."""

    key: str
    """Model id, run id, ``env:<id>``, ``ollama:<name>`` or a path."""
    kind: str
    """``env``, ``run``, ``base``, ``ollama`` or a model kind."""
    title: str
    subtitle: str = ""
    current: bool = False
    """The model the chain was drawn for."""


def _index_by_path(models: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Model paths (file and folder, resolved) to model ids."""
    out: dict[str, str] = {}
    for m in models:
        p = Path(str(m.get("path", "")))
        if not str(p):
            continue
        out[str(p)] = m["id"]
        out[str(p.parent)] = m["id"]
    return out


def _run_env(run: Mapping[str, Any]) -> str:
    config = run.get("config") or {}
    summary = run.get("summary") or {}
    return str(summary.get("env") or config.get("env") or config.get("spec") or "")


def _model_node(model: Mapping[str, Any], current: bool) -> ChainNode:
    kind = str(model.get("kind", "model"))
    return ChainNode(
        key=str(model["id"]),
        kind=kind,
        title=str(model.get("name", model["id"])),
        subtitle=KIND_LABELS.get(kind, kind),
        current=current,
    )


def _children_runs(
    model: Mapping[str, Any], runs: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Runs that took ``model`` as input (by id in ``parents`` or by path)."""
    mid = str(model["id"])
    path = Path(str(model.get("path", "")))
    paths = {str(path), str(path.parent)}
    out = []
    for run in runs:
        config = run.get("config") or {}
        if mid in (config.get("parents") or []):
            out.append(run)
            continue
        values = (config.get(k) for k in ("adapter", "model_dir", "gguf", "policy"))
        if any(isinstance(v, str) and v in paths for v in values):
            out.append(run)
    return out


def _next_of_export(
    model: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    by_id: Mapping[str, Mapping[str, Any]],
    seen: set[str],
) -> Mapping[str, Any] | None:
    """The model a one-click export (``export.ollama``) made from ``model``:
    its stages register one chain in order (merged → GGUF → Ollama model)."""
    run = runs.get(str(model.get("source_run") or "")) or {}
    if run.get("kind") != "export.ollama":
        return None
    made = [str(i) for i in (run.get("summary") or {}).get("registered_models") or []]
    mid = str(model["id"])
    if mid not in made or made.index(mid) + 1 == len(made):
        return None
    following = made[made.index(mid) + 1]
    return by_id.get(following) if following not in seen else None


def lineage_chain(
    model_id: str,
    links: Iterable[Sequence[str]],
    models: Sequence[Mapping[str, Any]],
    runs: Mapping[str, Mapping[str, Any]],
    max_length: int = 12,
) -> list[ChainNode]:
    """The chain from the model's environment to its last deployment."""
    by_id = {str(m["id"]): m for m in models}
    model = by_id.get(model_id)
    if model is None:
        return []
    parents: dict[str, list[str]] = {}
    for parent, child, _relation in links:
        parents.setdefault(str(child), []).append(str(parent))
    seen = {model_id}
    chain = _ancestry(model, parents, by_id, runs, seen, max_length)
    _append_descendants(chain, model, by_id, runs, seen, max_length)
    return chain


def _ancestry(
    model: Mapping[str, Any],
    parents: Mapping[str, list[str]],
    by_id: Mapping[str, Mapping[str, Any]],
    runs: Mapping[str, Mapping[str, Any]],
    seen: set[str],
    max_length: int,
) -> list[ChainNode]:
    """The model and what it came from: the parent inside the project (a
    model, else its run) up to the env; parents outside it (a base model
    folder or hub id) are side notes."""
    by_path = _index_by_path(list(by_id.values()))

    def resolve(ref: str) -> tuple[str, str]:
        """(kind of node, key) for a lineage parent."""
        if ref in by_id:
            return "model", ref
        if ref in runs:
            return "run", ref
        found = by_path.get(ref) or by_path.get(str(Path(ref)))
        if found:
            return "model", found
        return "external", ref

    chain: list[ChainNode] = [_model_node(model, current=True)]
    current = str(model["id"])
    while len(chain) < max_length:
        refs = [resolve(r) for r in parents.get(current, [])]
        refs = [r for r in refs if r[1] not in seen]
        models_up = [key for kind, key in refs if kind == "model"]
        runs_up = [key for kind, key in refs if kind == "run"]
        external = [key for kind, key in refs if kind == "external"]
        if models_up:
            current = models_up[0]
            seen.add(current)
            chain.insert(0, _model_node(by_id[current], current=False))
            continue
        if runs_up:
            run = runs[runs_up[0]]
            seen.add(runs_up[0])
            title = str(run.get("name") or runs_up[0])
            subtitle = str(run.get("kind", "run"))
            chain.insert(0, ChainNode(runs_up[0], "run", title, subtitle))
            env = _run_env(run)
            if env:
                chain.insert(0, ChainNode(f"env:{env}", "env", env, "environment"))
            elif external:
                chain.insert(0, _external_node(external[0]))
            break
        if external:
            chain.insert(0, _external_node(external[0]))
        elif model.get("env") and chain[0].kind != "env":
            env = str(model["env"])
            chain.insert(0, ChainNode(f"env:{env}", "env", env, "environment"))
        break
    if chain[0].kind not in ("env", "base") and model.get("env"):
        env = str(model["env"])
        chain.insert(0, ChainNode(f"env:{env}", "env", env, "environment"))
    return chain


def _ollama_node(run: Mapping[str, Any]) -> ChainNode | None:
    """A completed deployment that registered no model (older ones): its
    Ollama name alone."""
    summary = run.get("summary") or {}
    if (
        run.get("kind") != "deploy.ollama"
        or run.get("status") != "completed"
        or summary.get("registered_models")
    ):
        return None
    name = str((run.get("config") or {}).get("name", "?"))
    deployed = (summary.get("deploy") or {}).get("deployed")
    return ChainNode(
        OLLAMA_PREFIX + name, "ollama", name, "Ollama" if deployed else "bundle"
    )


def _append_descendants(
    chain: list[ChainNode],
    model: Mapping[str, Any],
    by_id: Mapping[str, Mapping[str, Any]],
    runs: Mapping[str, Mapping[str, Any]],
    seen: set[str],
    max_length: int,
) -> None:
    """What runs made from the model (the first of each), and deployments."""
    node = model
    while len(chain) < max_length:
        follow: Mapping[str, Any] | None = _next_of_export(node, runs, by_id, seen)
        for run in [] if follow is not None else _children_runs(node, runs.values()):
            ollama = _ollama_node(run)
            if ollama is not None:
                chain.append(ollama)
                return
            for child_id in (run.get("summary") or {}).get("registered_models") or []:
                made = by_id.get(str(child_id))
                if made is not None and str(made["id"]) not in seen:
                    follow = made
                    break
            if follow is not None:
                break
        if follow is None:
            return
        seen.add(str(follow["id"]))
        chain.append(_model_node(follow, current=False))
        node = follow


def _external_node(ref: str) -> ChainNode:
    name = Path(ref).name or ref
    return ChainNode(key=ref, kind="base", title=name, subtitle="base model")
