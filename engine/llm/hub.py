"""Models from the Hugging Face Hub: a download with progress, stop and resume.

``hub.download`` jobs (and ``rl-studio-engine hub download REPO_ID``) fetch a
model repository into the Hugging Face cache (``$HF_HOME``), where
:func:`engine.llm.base.resolve_model` finds ``org/name`` afterwards: the
training jobs themselves still never download. Built on ``huggingface_hub``:
``HfApi.model_info`` (``GET /api/models/{repo}/revision/{rev}``, the files
and their sizes) then ``hf_hub_download`` per file (``HEAD`` then ``GET
/{repo}/resolve/{commit}/{file}``), so ``HF_ENDPOINT``, ``HF_HOME``,
``HF_TOKEN`` and ``HF_HUB_OFFLINE`` mean what they mean to every Hugging
Face tool. A connection cut mid-file is resumed with a ``Range`` request by
``huggingface_hub``'s ``http_get``; the bytes of a stopped download stay in
the cache (``blobs/<etag>`` + :data:`PARTIAL_SUFFIX`) and the next download
of the repo resumes from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError
from engine.settings import checked_config, fields_of, form_field, setting

KIND = "hub.download"

CHUNK_BYTES = 1024 * 1024
"""Bytes read between progress reports and stop checks (huggingface_hub's
default, 10 MB, is seconds apart on a slow line)."""

PARTIAL_SUFFIX = ".rlstudio-partial"
"""A blob's bytes so far, kept in the cache when a download stops."""

Progress = Callable[[int, int, str], None]
"""``progress(done_bytes, total_bytes, file)``."""


@dataclass
class HubDownloadConfig:
    """Settings of a ``hub.download`` job."""

    repo_id: str = setting("", label="Repository", picker="base_model")
    """The model's Hub id, ``org/name`` (``Qwen/Qwen2.5-0.5B-Instruct``)."""
    revision: str = setting("main")
    """A branch, tag or commit of the repository."""


class DownloadStopped(Exception):
    """Raised from the progress hook when the job is asked to stop."""


def schema(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The download dialog's form, from :class:`HubDownloadConfig`."""
    return [
        form_field(info, default=values.get(info.name, info.default))
        for info in fields_of(HubDownloadConfig).values()
    ]


def validate(config: dict[str, Any]) -> dict[str, Any]:
    out = checked_config(HubDownloadConfig, config, "the hub download job")
    repo = str(out["repo_id"]).strip()
    parts = repo.split("/")
    if not repo or len(parts) > 2 or not all(parts) or " " in repo:
        raise ConfigError(
            "repo_id", f"repo_id must be a Hub id such as org/name, not {repo!r}."
        )
    if not str(out["revision"]).strip():
        raise ConfigError("revision", "revision must name a branch, tag or commit.")
    out["repo_id"], out["revision"] = repo, str(out["revision"]).strip()
    return out


def endpoint() -> str:
    """The Hub the download talks to (``$HF_ENDPOINT`` or huggingface.co)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def search(query: str, limit: int = 20) -> list[dict[str, Any]]:
    """Text-generation models on the Hub whose id contains ``query``, most
    downloaded first (``HfApi.list_models``: ``GET /api/models``). Errors
    are one :class:`EngineError` sentence."""
    from huggingface_hub import HfApi, constants

    where = endpoint()
    if constants.HF_HUB_OFFLINE:
        raise EngineError(
            "The Hub is not searched: HF_HUB_OFFLINE is set (local models are "
            "still offered)."
        )
    try:
        found = HfApi().list_models(
            search=query.strip() or None,
            pipeline_tag="text-generation",
            sort="downloads",
            limit=limit,
        )
        return [
            {
                "id": m.id,
                "downloads": int(m.downloads or 0),
                "likes": int(m.likes or 0),
                "gated": bool(m.gated),
            }
            for m in found
        ]
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise EngineError(
            f"Searching {where} failed ({type(exc).__name__}"
            + (f": {first}" if first else "")
            + "); local models are still offered."
        ) from None


def download(
    repo_id: str,
    revision: str = "main",
    progress: Progress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Every file of ``repo_id`` at ``revision`` into the HF cache; returns
    ``{"repo_id", "revision", "commit", "path", "files", "bytes",
    "stopped"}`` (``path``: the snapshot folder). Errors are one
    :class:`EngineError` sentence."""
    from huggingface_hub import HfApi, constants, hf_hub_download

    if constants.HF_HUB_OFFLINE:
        raise EngineError(
            f"Cannot download {repo_id}: HF_HUB_OFFLINE is set, so the Hugging "
            "Face Hub may not be reached (unset it to download)."
        )
    # Read at each download by huggingface_hub's http_get.
    constants.DOWNLOAD_CHUNK_SIZE = CHUNK_BYTES
    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as exc:
        raise EngineError(_sentence(exc, repo_id, revision)) from None
    files = [(s.rfilename, int(s.size or 0)) for s in info.siblings or []]
    total = sum(size for _name, size in files)
    done_before = 0
    current = ""
    state = {"done": 0}

    def report(n: int) -> None:
        state["done"] += n
        if progress is not None:
            progress(done_before + state["done"], total, current)
        if should_stop():
            raise DownloadStopped

    class _Bar:
        """What ``hf_hub_download`` calls as its ``tqdm_class``."""

        def __init__(self, *args: Any, initial: int = 0, **kwargs: Any) -> None:
            state["done"] = 0
            if initial:  # bytes already in the .incomplete file: resumed
                report(int(initial))

        def __enter__(self) -> _Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def update(self, n: int | float | None = 1) -> None:
            report(int(n or 0))

        def close(self) -> None:
            pass

    path: Path | None = None
    result = {
        "repo_id": repo_id,
        "revision": revision,
        "commit": info.sha,
        "files": len(files),
        "bytes": total,
        "stopped": False,
    }
    for name, size in files:
        current = name
        state["done"] = 0
        try:
            _fetch_blob(repo_id, name, str(info.sha), _Bar)
            # The blob is there: this only links it into the snapshot.
            local = hf_hub_download(repo_id, name, revision=info.sha)
        except DownloadStopped:
            result["stopped"] = True
            break
        except Exception as exc:
            raise EngineError(_sentence(exc, repo_id, revision, name)) from None
        done_before += size
        if progress is not None:
            progress(done_before, total, name)
        path = Path(local).parent if path is None else path
        if should_stop():
            result["stopped"] = True
            break
    snapshot = _snapshot_folder(repo_id, str(info.sha))
    result["path"] = str(snapshot if snapshot.is_dir() else (path or snapshot))
    return result


def _fetch_blob(repo_id: str, name: str, commit: str, bar: type) -> None:
    """Download one file's blob into the cache, resuming the partial file an
    earlier, stopped download left (``huggingface_hub`` resumes only within
    one call: it deletes its partial file when a download fails)."""
    import os

    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get, repo_folder_name
    from huggingface_hub.utils._fixes import WeakFileLock
    from huggingface_hub.utils._headers import build_hf_headers

    meta = get_hf_file_metadata(hf_hub_url(repo_id, name, revision=commit))
    if not meta.etag:
        return  # hf_hub_download will say what is wrong
    folder = repo_folder_name(repo_id=repo_id, repo_type="model")
    blob = Path(constants.HF_HUB_CACHE) / folder / "blobs" / meta.etag
    if blob.exists():
        return
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock = (
        Path(constants.HF_HUB_CACHE) / ".locks" / folder / f"{meta.etag}.rlstudio.lock"
    )
    lock.parent.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(blob.name + PARTIAL_SUFFIX)
    with WeakFileLock(str(lock)):
        if blob.exists():  # another download finished it meanwhile
            return
        with partial.open("ab") as f:
            http_get(
                meta.location,
                f,
                resume_size=f.tell(),
                headers=build_hf_headers(),
                expected_size=meta.size,
                tqdm_class=bar,
            )
        os.replace(partial, blob)


def _snapshot_folder(repo_id: str, commit: str) -> Path:
    from huggingface_hub import constants

    folder = "models--" + repo_id.replace("/", "--")
    return Path(constants.HF_HUB_CACHE) / folder / "snapshots" / commit


def _sentence(
    exc: BaseException, repo_id: str, revision: str, file: str | None = None
) -> str:
    """One sentence for what went wrong talking to the Hub."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = endpoint()
    if isinstance(exc, GatedRepoError):
        return (
            f"{repo_id} is a gated model: accept its terms on the Hub and set "
            "HF_TOKEN to a token of that account to download it."
        )
    if isinstance(exc, RepositoryNotFoundError):
        return (
            f"{repo_id} was not found on {where}: check the name, or set HF_TOKEN "
            "if it is a private or gated model."
        )
    if isinstance(exc, RevisionNotFoundError):
        return f"{repo_id} has no revision {revision!r} on {where}."
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        if status in (401, 403):
            return (
                f"{where} refused {repo_id} (HTTP {status}): set HF_TOKEN to a "
                "token that may read it."
            )
        what = f"{file} of {repo_id}" if file else repo_id
        return f"Downloading {what} from {where} failed with HTTP {status}."
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    what = f"{file} of {repo_id}" if file else repo_id
    return (
        f"Downloading {what} from {where} failed: {type(exc).__name__}"
        + (f": {first}" if first else "")
        + "."
    )


def run(ctx: Any) -> dict[str, Any]:
    """The ``hub.download`` job: progress in bytes, stop between chunks."""
    cfg = ctx.config
    ctx.log(f"Downloading {cfg['repo_id']} ({cfg['revision']}) from {endpoint()}.")
    last = {"file": ""}

    def progress(done: int, total: int, file: str) -> None:
        if file != last["file"]:
            last["file"] = file
            ctx.log(f"{file}")
        ctx.progress(done, max(total, 1), file)

    result = download(
        cfg["repo_id"],
        cfg["revision"],
        progress=progress,
        should_stop=lambda: bool(ctx.should_stop),
    )
    if result["stopped"]:
        ctx.log("Stopped; downloading it again resumes where it stopped.")
    else:
        ctx.log(f"Downloaded {result['files']} files to {result['path']}.")
    return result
