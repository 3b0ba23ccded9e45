"""Models from the Hugging Face Hub: a download with progress, stop and resume.

``hub.download`` jobs (and ``rl-studio-engine hub download REPO_ID``) fetch a
model repository into the Hugging Face cache (``$HF_HOME``), where
:func:`engine.llm.base.resolve_model` finds ``org/name`` afterwards: the
training jobs themselves still never download. It speaks the Hub's download
API through ``huggingface_hub``'s HTTP session (so ``HF_ENDPOINT``,
``HF_HOME``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` mean what they mean to
every Hugging Face tool): ``GET /api/models/{repo}/revision/{rev}?blobs=true``
(the commit, the files, their sizes and LFS digests), then per file ``HEAD``
and ``GET /{repo}/resolve/{commit}/{file}``, and it lays the cache out as
``huggingface_hub`` does (``blobs/<etag>``, ``snapshots/<commit>/<file>``
linking to it, ``refs/<revision>``).

The server is not trusted (a mirror set by ``HF_ENDPOINT`` may be anyone):

* every name it sends that becomes a path (the commit, each ETag, each file
  name) must match a strict pattern and stay inside the cache folder, checked
  before anything is written for it;
* what arrives must have the size the listing gives and the digest its ETag
  names (sha256 for LFS files, git's blob sha1 for the others); a mismatch
  deletes the partial file;
* every request has a stall timeout (no bytes for :data:`STALL_S` seconds)
  and the whole download a deadline (:data:`DEADLINE_S`);
* every failure is one :class:`EngineError` sentence.

A connection cut mid-file is resumed with a ``Range`` request; the bytes of a
stopped (or stalled) download stay in the cache (``blobs/<etag>`` +
:data:`PARTIAL_SUFFIX`) and the next download of the repo resumes from them.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from engine import untrusted
from engine.errors import MAX_QUOTED_CHARS, ConfigError, EngineError, quoted
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.progress import Progress
from engine.settings import build, setting

KIND = "hub.download"

CHUNK_BYTES = 1024 * 1024
"""Bytes received between progress reports."""

PARTIAL_SUFFIX = ".rlstudio-partial"
"""A blob's bytes so far, kept in the cache when a download stops."""

DEADLINE_S = 24 * 3600.0
"""Longest a whole download may take, in seconds (a day: tens of GB on a
slow line), unless the job says otherwise."""
STALL_S = 60.0
"""Longest the server may send nothing while a request is open, in seconds."""
LISTING_MAX_BYTES = 16 * 1024 * 1024
"""Largest file listing (or error body) read from the server."""
MAX_FILES = 100_000
"""Most files a repository's listing may name."""
NAME_MAX_CHARS = 1000
"""Longest file name (a relative path) taken from a listing."""
SEGMENT_MAX_BYTES = 255
"""Longest part of a file name between slashes (a file system's limit)."""
RETRIES = 5
"""Times a connection cut mid-file is resumed before the download fails."""

_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REPO_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO = re.compile(rf"(?:{_REPO_PART}/)?{_REPO_PART}")
_REVISION = re.compile(r"[A-Za-z0-9._/+=@-]{1,200}")


@dataclass(frozen=True)
class HubDownloadConfig:
    """Settings of a ``hub.download`` job."""

    repo_id: str = setting("", label="Repository", picker="base_model")
    """The model's Hub id, ``org/name`` (``Qwen/Qwen2.5-0.5B-Instruct``)."""
    revision: str = setting("main")
    """A branch, tag or commit of the repository."""
    deadline_s: float = setting(
        DEADLINE_S, unit="s", min=0.1, max=30 * 86400.0, form=False
    )
    """Longest the whole download may take; past it, it stops with what it
    has (a new download resumes)."""
    stall_s: float = setting(STALL_S, unit="s", min=0.1, max=3600.0, form=False)
    """Longest the server may send nothing before the download fails."""


class DownloadStopped(Exception):
    """Raised from the progress hook when the job is asked to stop."""


class _Cut(Exception):
    """The connection ended before the file did: resume it."""


def validate(config: Mapping[str, Any]) -> HubDownloadConfig:
    cfg = build(HubDownloadConfig, config, "the hub download job")
    repo, revision = checked_source(cfg.repo_id, cfg.revision)
    return replace(cfg, repo_id=repo, revision=revision)


def checked_source(repo_id: str, revision: str) -> tuple[str, str]:
    """A Hub job's ``repo_id`` and ``revision``, stripped, as a download may
    use them (:func:`repo_id_problem`, :func:`revision_problem`); else the
    :class:`ConfigError` naming the field at fault."""
    repo, revision = repo_id.strip(), revision.strip()
    problem = repo_id_problem(repo)
    if problem:
        raise ConfigError("repo_id", problem)
    if not revision:
        raise ConfigError("revision", "revision must name a branch, tag or commit.")
    problem = revision_problem(revision)
    if problem:
        raise ConfigError("revision", problem)
    return repo, revision


def repo_id_problem(repo: str) -> str:
    """Why ``repo`` is not a Hub id (the Hub's own rule), or ``""``."""
    if (
        not _REPO.fullmatch(repo)
        or "--" in repo
        or ".." in repo
        or len(repo) > 96 * 2 + 1
    ):
        return f"repo_id must be a Hub id such as org/name, not {quoted(repo)}."
    return ""


def revision_problem(revision: str) -> str:
    """Why ``revision`` cannot name a branch, tag or commit safely, or ``""``:
    it becomes ``refs/<revision>`` in the cache, so no ``..``, no empty part
    and nothing but the characters git refs use."""
    parts = revision.split("/")
    if (
        not _REVISION.fullmatch(revision)
        or any(p in ("", ".", "..") for p in parts)
        or ".." in revision
        or revision.startswith("-")
    ):
        return (
            f"revision must name a branch, tag or commit (letters, digits and "
            f"._-/+=@, no '..'), not {quoted(revision)}."
        )
    return ""


def file_name_problem(name: object) -> str:
    """Why a listed file name cannot be a path inside a snapshot, or ``""``."""
    if not isinstance(name, str) or not name:
        return "it is not a non-empty text"
    if len(name) > NAME_MAX_CHARS:
        return f"it is longer than {NAME_MAX_CHARS} characters"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "it holds a control character"
    if "\\" in name:
        return "it holds a backslash"
    if name.startswith("/"):
        return "it is an absolute path"
    try:
        encoded = [p.encode("utf-8") for p in name.split("/")]
    except UnicodeEncodeError:
        return "it is not valid Unicode"
    if any(p in (b"", b".", b"..") for p in encoded):
        return "it has an empty, '.' or '..' part"
    if any(len(p) > SEGMENT_MAX_BYTES for p in encoded):
        return f"a part of it is longer than {SEGMENT_MAX_BYTES} bytes"
    return ""


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


# ------------------------------------------------------------------ download


@dataclass(frozen=True)
class _File:
    """One file of the listing."""

    name: str
    size: int
    lfs_sha256: str | None
    """The LFS object's sha256 (the ETag the Hub gives such a file)."""


@dataclass
class _Clock:
    """The download's deadline and its stall timeout."""

    deadline_s: float
    stall_s: float
    repo_id: str

    def __post_init__(self) -> None:
        self.end = time.monotonic() + self.deadline_s

    def timeout(self) -> Any:
        """An ``httpx`` timeout: the stall timeout, or less near the end."""
        import httpx2

        left = self.end - time.monotonic()
        if left <= 0:
            raise self.late()
        return httpx2.Timeout(min(self.stall_s, max(left, 0.01)))

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise self.late()

    def late(self) -> EngineError:
        return EngineError(
            f"Downloading {self.repo_id} from {endpoint()} did not finish within "
            f"{self.deadline_s:g} s; downloading it again resumes where it stopped."
        )


def download(
    repo_id: str,
    revision: str = "main",
    progress: Progress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    *,
    deadline_s: float = DEADLINE_S,
    stall_s: float = STALL_S,
) -> dict[str, Any]:
    """Every file of ``repo_id`` at ``revision`` into the HF cache; returns
    ``{"repo_id", "revision", "commit", "path", "files", "bytes",
    "stopped"}`` (``path``: the snapshot folder). Errors are one
    :class:`EngineError` sentence."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise EngineError(
            f"Cannot download {repo_id}: HF_HUB_OFFLINE is set, so the Hugging "
            "Face Hub may not be reached (unset it to download)."
        )
    for problem in (repo_id_problem(repo_id), revision_problem(revision)):
        if problem:
            raise EngineError(problem)
    clock = _Clock(deadline_s, stall_s, repo_id)
    root = Path(constants.HF_HUB_CACHE)
    storage = _inside(root, "models--" + repo_id.replace("/", "--"), repo_id)
    commit, files = _listing(repo_id, revision, clock)
    snapshot = _inside(storage, f"snapshots/{commit}", repo_id, follow_last=True)
    # Every path the listing and the files' ETags imply is checked before
    # anything is written.
    for f in files:
        _inside(snapshot, f.name, repo_id)
    metas = []
    for f in files:
        if should_stop():
            break  # nothing written yet: the result says it stopped
        metas.append(_head(repo_id, commit, f, _file_url(repo_id, commit, f), clock))
    refs = None if revision == commit else _inside(storage, f"refs/{revision}", repo_id)
    total = sum(f.size for f in files)
    result: dict[str, Any] = {
        "repo_id": repo_id,
        "revision": revision,
        "commit": commit,
        "files": len(files),
        "bytes": total,
        "stopped": False,
        "path": str(snapshot),
    }
    done_before = 0
    try:
        if len(metas) < len(files):
            raise DownloadStopped
        for f, meta in zip(files, metas, strict=True):

            def report(
                done: int, name: str = f.name, before: int = done_before
            ) -> None:
                if progress is not None:
                    progress(before + done, total, name)
                if should_stop():
                    raise DownloadStopped

            _fetch_file(repo_id, commit, f, meta, storage, snapshot, clock, report)
            done_before += f.size
            if progress is not None:
                progress(done_before, total, f.name)
            if should_stop():
                raise DownloadStopped
    except DownloadStopped:
        result["stopped"] = True
    if refs is not None:
        _write(refs, commit.encode(), repo_id)
    return result


def _inside(
    folder: Path, relative: str, repo_id: str, *, follow_last: bool = False
) -> Path:
    """``folder / relative``, refused unless it stays inside ``folder`` once
    every link that already exists on the way to it is followed. The last
    part is followed only with ``follow_last`` (a folder written into): a
    file is replaced, never written through."""
    path = folder / relative
    try:
        base = folder.resolve()
        end = path.resolve() if follow_last else path.parent.resolve() / path.name
        end.relative_to(base)
    except (ValueError, OSError, RuntimeError):
        raise EngineError(
            f"The download of {repo_id} would write {quoted(path)}, outside "
            f"{quoted(folder)}; it was refused."
        ) from None
    return path


@contextmanager
def _request(
    method: str,
    url: str,
    clock: _Clock,
    what: str,
    headers: dict[str, str] | None = None,
    follow: bool = True,
) -> Iterator[Any]:
    """One streamed request with the clock's timeouts; network failures are
    one sentence naming ``what``."""
    import httpx2
    from huggingface_hub import get_session
    from huggingface_hub.utils._headers import build_hf_headers

    sent = {**build_hf_headers(), "Accept-Encoding": "identity", **(headers or {})}
    try:
        with get_session().stream(
            method, url, headers=sent, timeout=clock.timeout(), follow_redirects=follow
        ) as response:
            yield response
    except httpx2.TimeoutException:
        clock.check()
        raise EngineError(
            f"Downloading {what} from {endpoint()} stalled: the server sent "
            f"nothing for {clock.stall_s:g} s; downloading it again resumes where "
            "it stopped."
        ) from None
    except httpx2.HTTPError as exc:
        raise EngineError(
            f"Downloading {what} from {endpoint()} failed: {type(exc).__name__}"
            + (f": {_first_line(exc)}" if _first_line(exc) else "")
            + "."
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:MAX_QUOTED_CHARS] if text else ""


def _read_body(response: Any, clock: _Clock, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a response; None when it is longer."""
    data = bytearray()
    for piece in response.iter_raw():
        data += piece
        if len(data) > limit:
            return None
        clock.check()
    return bytes(data)


def _status_sentence(
    response: Any, repo_id: str, revision: str, file: str | None = None
) -> str:
    """One sentence for an error answer of the Hub (its ``X-Error-Code``
    first, as ``huggingface_hub`` reads it, then the status)."""
    where = endpoint()
    status = int(response.status_code)
    code = response.headers.get("X-Error-Code", "")
    what = f"{file} of {repo_id}" if file else repo_id
    if code == "GatedRepo":
        return (
            f"{repo_id} is a gated model: accept its terms on the Hub and set "
            "HF_TOKEN to a token of that account to download it."
        )
    if code == "RepoNotFound" or (status == 404 and not file and not code):
        return (
            f"{repo_id} was not found on {where}: check the name, or set HF_TOKEN "
            "if it is a private or gated model."
        )
    if code == "RevisionNotFound":
        return f"{repo_id} has no revision {quoted(revision)} on {where}."
    if code == "EntryNotFound" or status == 404:
        return f"{what} was not found on {where} (HTTP 404)."
    if status in (401, 403):
        return (
            f"{where} refused {repo_id} (HTTP {status}): set HF_TOKEN to a "
            "token that may read it."
        )
    return f"Downloading {what} from {where} failed with HTTP {status}."


def _listing(repo_id: str, revision: str, clock: _Clock) -> tuple[str, list[_File]]:
    """The commit ``revision`` names and the files there, checked."""
    where = endpoint()
    url = f"{where}/api/models/{repo_id}/revision/{quote(revision, safe='')}?blobs=true"
    with _request("GET", url, clock, repo_id) as response:
        if response.status_code >= 400:
            raise EngineError(_status_sentence(response, repo_id, revision))
        body = _read_body(response, clock, LISTING_MAX_BYTES)
        if response.status_code != 200:
            raise EngineError(
                f"{where} answered the file list of {repo_id} with HTTP "
                f"{response.status_code}, not 200."
            )
    what = f"The file list of {repo_id} from {where}"
    if body is None:
        raise EngineError(f"{what} is larger than {LISTING_MAX_BYTES:,} bytes.")
    try:
        data = untrusted.loads(body, what)
    except untrusted.UntrustedDataError as exc:
        raise EngineError(str(exc)) from None
    if not isinstance(data, dict):
        raise EngineError(f"{what} is not a JSON object.")
    commit = data.get("sha")
    if not isinstance(commit, str) or not _HEX.fullmatch(commit):
        raise EngineError(
            f"{what} gives the commit {quoted(commit)}, which is not a 40- or "
            "64-digit lowercase hex digest; nothing was written."
        )
    siblings = data.get("siblings")
    if not isinstance(siblings, list) or len(siblings) > MAX_FILES:
        raise EngineError(
            f"{what} has no list of at most {MAX_FILES:,} files ('siblings')."
        )
    files: list[_File] = []
    seen: set[str] = set()
    for item in siblings:
        name = item.get("rfilename") if isinstance(item, dict) else None
        problem = file_name_problem(name)
        if problem:
            raise EngineError(
                f"{what} names the file {quoted(name)}, which cannot be a path in "
                f"the cache ({problem}); nothing was written."
            )
        assert isinstance(name, str) and isinstance(item, dict)
        if name in seen:
            raise EngineError(f"{what} names the file {quoted(name)} twice.")
        seen.add(name)
        size = item.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise EngineError(f"{what} gives no size for {quoted(name)}.")
        lfs = item.get("lfs")
        sha = None
        if lfs is not None:
            sha = lfs.get("sha256") if isinstance(lfs, dict) else None
            if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise EngineError(
                    f"{what} gives {quoted(name)} the LFS digest {quoted(sha)}, "
                    "which is not a sha256 hex digest; nothing was written."
                )
            if lfs.get("size", size) != size:
                raise EngineError(
                    f"{what} gives {quoted(name)} two sizes ({size} and its LFS "
                    f"object's {quoted(lfs.get('size'))})."
                )
        files.append(_File(name, size, sha))
    return commit, files


@dataclass(frozen=True)
class _Meta:
    """What the ``HEAD`` of a file says: its blob name and size."""

    etag: str
    size: int


def _head(repo_id: str, commit: str, f: _File, url: str, clock: _Clock) -> _Meta:
    """The file's ETag (``X-Linked-Etag`` for an LFS file), its size and its
    commit from a ``HEAD``, all checked against the listing."""
    where = endpoint()
    what = f"{f.name} of {repo_id}"
    headers: Any = None
    for _hop in range(5):
        # A relative redirect is a renamed repo; an absolute one is the
        # storage of an LFS file, whose X-Linked-* headers the Hub sends here.
        with _request("HEAD", url, clock, what, follow=False) as response:
            status, headers = int(response.status_code), response.headers
            if status >= 400:
                raise EngineError(_status_sentence(response, repo_id, commit, f.name))
        location = headers.get("Location", "")
        if 300 <= status < 400 and location.startswith("/"):
            url = where + location
            continue
        break
    raw = headers.get("X-Linked-Etag") or headers.get("ETag") or ""
    etag = raw.removeprefix("W/").strip('"')
    if not _HEX.fullmatch(etag):
        raise EngineError(
            f"{where} sent the ETag {quoted(raw)} for {what}, which is not a 40- or "
            "64-digit lowercase hex digest; it was not downloaded."
        )
    if f.lfs_sha256 is not None and etag != f.lfs_sha256:
        raise EngineError(
            f"{where} sent the ETag {quoted(etag)} for {what}, not the LFS digest "
            f"{f.lfs_sha256} of its file list; it was not downloaded."
        )
    got_commit = headers.get("X-Repo-Commit")
    if got_commit is not None and got_commit != commit:
        raise EngineError(
            f"{where} sent the commit {quoted(got_commit)} for {what}, not {commit} "
            "of its file list; it was not downloaded."
        )
    size_text = headers.get("X-Linked-Size") or headers.get("Content-Length")
    if size_text is not None and size_text.strip() != str(f.size):
        raise EngineError(
            f"{where} gives {what} {quoted(size_text)} bytes, not the {f.size} of its "
            "file list; it was not downloaded."
        )
    return _Meta(etag, f.size)


def _file_url(repo_id: str, commit: str, f: _File) -> str:
    return f"{endpoint()}/{repo_id}/resolve/{commit}/{quote(f.name)}"


def _fetch_file(
    repo_id: str,
    commit: str,
    f: _File,
    meta: _Meta,
    storage: Path,
    snapshot: Path,
    clock: _Clock,
    report: Callable[[int], None],
) -> None:
    """One file into the cache: its blob (unless there) and the snapshot's
    link to it."""
    url = _file_url(repo_id, commit, f)
    blob = _inside(storage, f"blobs/{meta.etag}", repo_id)
    pointer = _inside(snapshot, f.name, repo_id)
    if not (blob.is_file() and blob.stat().st_size == meta.size):
        _fetch_blob(repo_id, f, url, meta, blob, clock, report)
    _link(pointer, blob, snapshot, repo_id)


def _fetch_blob(
    repo_id: str,
    f: _File,
    url: str,
    meta: _Meta,
    blob: Path,
    clock: _Clock,
    report: Callable[[int], None],
) -> None:
    """Download a blob into ``<blob>`` + :data:`PARTIAL_SUFFIX`, resuming what
    an earlier download left, and move it into place once its size and digest
    are right. The partial file is deleted when they are not."""
    from huggingface_hub.utils._fixes import WeakFileLock

    partial = blob.with_name(blob.name + PARTIAL_SUFFIX)
    lock = blob.parent.parent / ".locks" / f"{meta.etag}.rlstudio.lock"
    try:
        blob.parent.mkdir(parents=True, exist_ok=True)
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(_os_sentence(exc, blob.parent)) from None
    with WeakFileLock(str(lock)):
        if blob.is_file() and blob.stat().st_size == meta.size:
            return  # another download finished it meanwhile
        try:
            with partial.open("ab+") as out:
                if out.seek(0, os.SEEK_END) > meta.size:
                    out.truncate(0)  # not this file's beginning
                _receive(repo_id, f, url, meta, out, clock, report)
        except _Mismatch as exc:
            partial.unlink(missing_ok=True)
            raise EngineError(str(exc)) from None
        except OSError as exc:
            raise EngineError(_os_sentence(exc, partial)) from None
        try:
            os.replace(partial, blob)
        except OSError as exc:
            raise EngineError(_os_sentence(exc, blob)) from None


class _Mismatch(Exception):
    """What arrived is not the file the listing describes (one sentence)."""


def _digest_of(out: Any, meta: _Meta) -> Any:
    """The digest the ETag names, fed with what ``out`` holds so far: sha256
    for a 64-digit ETag, git's blob id for a 40-digit one (sha1 of
    ``blob <size>\\0`` and the bytes)."""
    if len(meta.etag) == 64:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1(b"blob %d\0" % meta.size)
    out.seek(0)
    while chunk := out.read(CHUNK_BYTES):
        h.update(chunk)
    out.seek(0, os.SEEK_END)
    return h


def _receive(
    repo_id: str,
    f: _File,
    url: str,
    meta: _Meta,
    out: Any,
    clock: _Clock,
    report: Callable[[int], None],
) -> None:
    """GET the rest of the file into ``out`` (opened for appending), resuming
    a cut connection up to :data:`RETRIES` times; checks size and digest."""
    import httpx2

    what = f"{f.name} of {repo_id}"
    digest = _digest_of(out, meta)
    cuts = 0
    while out.tell() < meta.size:
        start = out.tell()
        report(start)
        try:
            with _request(
                "GET", url, clock, what, {"Range": f"bytes={start}-"} if start else {}
            ) as response:
                if response.status_code >= 400:
                    raise EngineError(_status_sentence(response, repo_id, "", f.name))
                if start and response.status_code != 206:
                    # The server sends it all again: start over.
                    out.truncate(0)
                    digest = _digest_of(out, meta)
                elif start and not response.headers.get("Content-Range", "").startswith(
                    f"bytes {start}-"
                ):
                    raise _Mismatch(
                        f"{endpoint()} resumed {what} at "
                        f"{quoted(response.headers.get('Content-Range'))}, not at "
                        f"byte {start}; the partial download was deleted."
                    )
                last = out.tell()
                try:
                    for piece in response.iter_raw():
                        if out.tell() + len(piece) > meta.size:
                            raise _Mismatch(
                                f"{endpoint()} sent more than the {meta.size:,} "
                                f"bytes the file list gives {what}; the partial "
                                "download was deleted."
                            )
                        out.write(piece)
                        digest.update(piece)
                        if out.tell() - last >= CHUNK_BYTES:
                            last = out.tell()
                            out.flush()
                            report(last)
                        clock.check()
                except (httpx2.RemoteProtocolError, httpx2.ReadError) as exc:
                    if out.tell() > start and cuts < RETRIES:
                        cuts += 1
                        continue  # resumed from what came
                    raise EngineError(
                        f"Downloading {what} from {endpoint()} failed: the "
                        f"connection ended early ({_first_line(exc)}); downloading "
                        "it again resumes where it stopped."
                    ) from None
        finally:
            out.flush()
        if out.tell() < meta.size:
            raise _Mismatch(
                f"{endpoint()} sent {out.tell():,} bytes of {what}, not the "
                f"{meta.size:,} its file list gives; the partial download was "
                "deleted."
            )
    got = digest.hexdigest()
    if got != meta.etag:
        kind = "sha256" if len(meta.etag) == 64 else "git sha1"
        raise _Mismatch(
            f"{what} from {endpoint()} does not match its ETag (its {kind} is "
            f"{got}, not {meta.etag}); the partial download was deleted."
        )


def _link(pointer: Path, blob: Path, snapshot: Path, repo_id: str) -> None:
    """``snapshots/<commit>/<file>`` as a relative link to its blob (a copy
    where links cannot be made), replaced atomically."""
    import shutil

    try:
        pointer.parent.mkdir(parents=True, exist_ok=True)
        # Created folders may not lead out either (a name over an old link).
        _inside(snapshot, str(pointer.relative_to(snapshot)), repo_id)
        temp = pointer.with_name(f".{pointer.name}.{os.getpid()}.rlstudio-link")
        temp.unlink(missing_ok=True)
        try:
            os.symlink(os.path.relpath(blob, pointer.parent), temp)
        except OSError:
            shutil.copyfile(blob, temp)
        os.replace(temp, pointer)
    except OSError as exc:
        raise EngineError(_os_sentence(exc, pointer)) from None


def _write(path: Path, data: bytes, repo_id: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_bytes(data)
        os.replace(temp, path)
    except OSError as exc:
        raise EngineError(_os_sentence(exc, path)) from None


def _os_sentence(exc: OSError, path: Path) -> str:
    return f"Writing {quoted(path)} failed ({exc.strerror or exc})."


@job_kind(
    KIND, check=validate, label="Hub download", group="data", progress_unit="bytes"
)
def run(ctx: JobContext, cfg: HubDownloadConfig) -> dict[str, Any]:
    """Downloads a model from the Hugging Face Hub into the HF cache (progress in
    bytes; a stopped download resumes).

    A stop is honoured between chunks."""
    ctx.log(f"Downloading {cfg.repo_id} ({cfg.revision}) from {endpoint()}.")
    last = {"file": ""}

    def progress(done: float, total: float, file: str) -> None:
        if file != last["file"]:
            last["file"] = file
            ctx.log(f"{file}")
        ctx.progress(done, max(total, 1), file)

    result = download(
        cfg.repo_id,
        cfg.revision,
        progress=progress,
        should_stop=lambda: bool(ctx.should_stop),
        deadline_s=cfg.deadline_s,
        stall_s=cfg.stall_s,
    )
    if result["stopped"]:
        ctx.log("Stopped; downloading it again resumes where it stopped.")
    else:
        ctx.log(f"Downloaded {result['files']} files to {result['path']}.")
    return result
