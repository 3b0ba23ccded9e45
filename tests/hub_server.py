"""A local stand-in for the Hugging Face Hub's download API, on 127.0.0.1 in a
thread, as ``huggingface_hub`` (2.x) uses it:

* ``GET /api/models/{repo}/revision/{rev}[?blobs=true]``: ``{"id", "sha",
  "siblings": [{"rfilename", "size", "blobId"}]}`` (``HfApi.model_info``);
* ``HEAD /{repo}/resolve/{rev}/{file}``: ``ETag``, ``X-Repo-Commit``,
  ``Content-Length`` (``get_hf_file_metadata``);
* ``GET /{repo}/resolve/{rev}/{file}`` with ``Range: bytes=N-`` answered
  ``206`` (``http_get``'s resume);
* ``GET /api/models?search=&pipeline_tag=&sort=&limit=`` (``HfApi.list_models``):
  the repos whose id contains ``search`` (case-insensitive) with that
  ``pipeline_tag``, sorted by ``sort`` (``downloads``, ``likes``) from the
  highest, at most ``limit``, each ``{"_id", "id", "modelId", "likes",
  "downloads", "private", "gated", "pipeline_tag", "tags", "createdAt"}``.
  ``search_status`` set to an HTTP status makes the search fail with it.

Errors carry the Hub's ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``,
``RevisionNotFound``). ``cut_once`` makes the first GET of a file close the
connection after that many bytes; ``delay_s`` slows each chunk so a test can
stop a download midway. Every request is recorded in ``requests``.

As the Hub does, a file whose name ends in an LFS extension (``.safetensors``,
``.bin``, ``.gguf``) is listed with ``"lfs": {"sha256", "size"}`` and its
ETag is that sha256; any other file's ETag (and every ``blobId``) is git's
blob id, the sha1 of ``blob <size>\\0`` and the bytes.

The upload API, as ``HfApi.create_repo`` and ``HfApi.create_commit`` of
``huggingface_hub`` 2.4 call it with the LFS protocol (``HF_HUB_DISABLE_XET``
set: the Hub's Xet storage is not followed here):

* ``POST /api/repos/create`` ``{"name", "organization", "visibility"}``:
  ``{"url"}``, or 409 (with the ``url``) when the repo exists
  (``exist_ok`` accepts it);
* ``POST /api/validate-yaml`` (a README's metadata): ``{"errors": [],
  "warnings": []}``;
* ``POST /api/models/{repo}/preupload/{rev}`` ``{"files": [{"path", "sample",
  "size"}]}``: each file's ``uploadMode`` (``lfs`` for an LFS extension or a
  sample holding a NUL byte, as the Hub decides, else ``regular``),
  ``shouldIgnore`` and ``oid`` (the git blob id of the file there now);
* ``POST /{repo}.git/info/lfs/objects/batch`` (git LFS's batch API): an
  ``upload`` and a ``verify`` action per object not stored yet;
  ``PUT /lfs-objects/{oid}`` stores the bytes (refused unless their sha256
  is ``oid``), ``POST /{repo}.git/info/lfs/objects/verify`` checks them;
* ``POST /api/models/{repo}/commit/{rev}``, NDJSON: a ``header`` line, then
  ``file`` (base64), ``lfsFile`` (an uploaded oid) and ``deletedFile``
  lines; the repo gets a new commit (``commits``) and answers
  ``{"commitUrl", "commitOid", "pullRequestUrl"}``.

Writes need ``Authorization: Bearer <token>`` (401 without, 403 with another
token); ``refuse`` maps a route name (``create``, ``preupload``, ``batch``,
``commit``) to an HTTP status it answers instead. ``pushes`` lists each
commit's ``(repo, summary, files)``.

A hostile server, for the attack tests: ``etags`` replaces a file's ETag
header, ``commit`` the commit of the listing and of ``X-Repo-Commit``,
``served`` the bytes a GET sends (the listing and HEAD still give the true
size), ``stall_after`` makes a GET send that many bytes then nothing until the
server closes (on a :class:`threading.Event`, no sleep), and ``listing``
replaces the whole answer of the file list with ``(status, body)``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".zip", ".mp4", ".pkl")


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        self.repos = repos
        self.gated: set[str] = set()
        self.token = "hf_test_token"
        self.cut_once: dict[str, int] = {}
        """file name -> bytes after which its first GET is cut."""
        self.delay_s = 0.0
        self.downloads: dict[str, int] = {}
        """repo -> downloads the search reports (and sorts by)."""
        self.pipeline_tags: dict[str, str] = {}
        """repo -> pipeline tag (default ``text-generation``)."""
        self.search_status: int | None = None
        self.chunk = 64 * 1024
        self.requests: list[dict[str, Any]] = []
        self.etags: dict[str, str] = {}
        """file name -> the raw ETag header sent for it instead."""
        self.commit = COMMIT
        self.served: dict[str, bytes] = {}
        """file name -> the bytes a GET sends instead."""
        self.stall_after: dict[str, int] = {}
        """file name -> bytes a GET sends before it stalls."""
        self.listing: tuple[int, bytes] | None = None
        """(status, body) answered for every file list instead."""
        self.released = threading.Event()
        """Set when the server closes: a stalled GET ends then."""
        self.commits: dict[str, str] = {}
        """repo -> its commit after a push (others answer ``commit``)."""
        self.lfs: dict[str, bytes] = {}
        """sha256 -> the bytes of an uploaded LFS object."""
        self.refuse: dict[str, int] = {}
        """upload route -> the HTTP status it answers instead."""
        self.pushes: list[tuple[str, str, list[str]]] = []
        """(repo, commit summary, files added) of each commit."""
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, head=True)

            def do_GET(self) -> None:
                hub._serve(self, head=False)

            def do_POST(self) -> None:
                hub._upload(self)

            def do_PUT(self) -> None:
                hub._upload(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A client that hangs up (a refused download) is no error to print.
        self.server.handle_error = lambda *args: None  # type: ignore[method-assign]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    # ----------------------------------------------------------------- serve
    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _allowed(self, h: BaseHTTPRequestHandler, repo: str) -> bool:
        if repo not in self.repos:
            # The Hub answers 401 for a repo it will not name to strangers.
            self._error(h, 401 if "Authorization" not in h.headers else 404,
                        "RepoNotFound")  # fmt: skip
            return False
        if repo in self.gated and h.headers.get("Authorization") != (
            f"Bearer {self.token}"
        ):
            self._error(h, 403 if "Authorization" in h.headers else 401, "GatedRepo")
            return False
        return True

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(h.path.split("?")[0])
        self.requests.append(
            {"method": h.command, "path": path, "range": h.headers.get("Range")}
        )
        if path == "/api/models":
            self._search(h)
            return
        api = re.fullmatch(r"/api/models/(.+?)/revision/([^/]+)", path)
        if api:
            repo, rev = api.groups()
            if not self._allowed(h, repo):
                return
            commit = self.commits.get(repo, self.commit)
            if rev not in ("main", commit):
                self._error(h, 404, "RevisionNotFound")
                return
            files = self.repos[repo]
            body = json.dumps(
                {
                    "id": repo,
                    "modelId": repo,
                    "sha": commit,
                    "private": False,
                    "gated": repo in self.gated,
                    "siblings": [_sibling(n, d) for n, d in files.items()],
                }
            ).encode()
            status = 200
            if self.listing is not None:
                status, body = self.listing
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        resolve = re.fullmatch(r"/(.+?/[^/]+)/resolve/([^/]+)/(.+)", path)
        if not resolve:
            self._error(h, 404, "EntryNotFound")
            return
        repo, rev, name = resolve.groups()
        if not self._allowed(h, repo):
            return
        data = self.repos[repo].get(name)
        if data is None:
            self._error(h, 404, "EntryNotFound")
            return
        if not head:  # HEAD gives the true size, GET sends these bytes
            data = self.served.get(name, data)
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range") or "")
        if match and not head:
            start = int(match.group(1))
        h.send_response(206 if start else 200)
        h.send_header("ETag", self.etags.get(name, f'"{_etag(name, data)}"'))
        h.send_header("X-Repo-Commit", self.commits.get(repo, self.commit))
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(data) - start))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        stall = self.stall_after.get(name)
        if stall is not None:
            h.wfile.write(data[start:stall])
            h.wfile.flush()
            self.released.wait()
            h.close_connection = True
            return
        cut = self.cut_once.pop(name, None)
        sent = start
        while sent < len(data):
            if cut is not None and sent >= cut:
                h.close_connection = True
                return  # mid-file: the client sees a short body
            end = min(len(data), sent + self.chunk)
            if cut is not None:
                end = min(end, cut) if sent < cut else end
            try:
                h.wfile.write(data[sent:end])
                h.wfile.flush()
            except OSError:
                return
            sent = end
            if self.delay_s:
                time.sleep(self.delay_s)

    def _search(self, h: BaseHTTPRequestHandler) -> None:
        query = parse_qs(urlsplit(h.path).query)
        if self.search_status is not None:
            self._error(h, self.search_status, "SearchFailed")
            return
        needle = (query.get("search") or [""])[0].casefold()
        tag = (query.get("pipeline_tag") or [""])[0]
        sort = (query.get("sort") or [""])[0]
        limit = int((query.get("limit") or ["1000"])[0])
        rows = [
            {
                "_id": hashlib.sha256(repo.encode()).hexdigest()[:24],
                "id": repo,
                "modelId": repo,
                "likes": 0,
                "downloads": self.downloads.get(repo, 0),
                "private": False,
                "gated": "auto" if repo in self.gated else False,
                "pipeline_tag": self.pipeline_tags.get(repo, "text-generation"),
                "tags": ["transformers"],
                "createdAt": "2024-01-01T00:00:00.000Z",
            }
            for repo in self.repos
            if needle in repo.casefold()
        ]
        rows = [r for r in rows if not tag or r["pipeline_tag"] == tag]
        if sort in ("downloads", "likes"):
            rows.sort(key=lambda r: -int(r[sort]))  # type: ignore[call-overload]
        body = json.dumps(rows[:limit]).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    # ---------------------------------------------------------------- upload
    def _json(self, h: BaseHTTPRequestHandler, status: int, data: object) -> None:
        body = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _may_write(self, h: BaseHTTPRequestHandler, route: str) -> bool:
        """The token may write, and the test does not refuse ``route``."""
        auth = h.headers.get("Authorization")
        if auth is None:
            self._error(h, 401, "Unauthorized")
            return False
        if auth != f"Bearer {self.token}":
            self._error(h, 403, "Forbidden")
            return False
        if route in self.refuse:
            self._error(h, self.refuse[route], "Refused")
            return False
        return True

    def _upload(self, h: BaseHTTPRequestHandler) -> None:
        path = unquote(h.path.split("?")[0])
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        self.requests.append({"method": h.command, "path": path, "range": None})
        if path == "/api/validate-yaml":
            self._json(h, 200, {"errors": [], "warnings": []})
            return
        if path == "/api/repos/create":
            if not self._may_write(h, "create"):
                return
            asked = json.loads(body)
            repo = f"{asked['organization']}/{asked['name']}"
            if repo in self.repos:
                self._json(
                    h,
                    409,
                    {
                        "error": "You already created this model repo",
                        "url": f"{self.url}/{repo}",
                    },
                )
                return
            self.repos[repo] = {}
            self._json(h, 200, {"url": f"{self.url}/{repo}", "name": repo})
            return
        pre = re.fullmatch(r"/api/models/(.+?/[^/]+)/preupload/([^/]+)", path)
        if pre:
            repo = pre.group(1)
            if not self._may_write(h, "preupload"):
                return
            if repo not in self.repos:
                self._error(h, 404, "RepoNotFound")
                return
            files = self.repos[repo]
            answer = []
            for f in json.loads(body)["files"]:
                sample = base64.b64decode(f["sample"])
                lfs = f["path"].endswith(LFS_SUFFIXES) or b"\0" in sample
                there = files.get(f["path"])
                answer.append(
                    {
                        "path": f["path"],
                        "uploadMode": "lfs" if lfs else "regular",
                        "shouldIgnore": False,
                        "oid": None if there is None else git_blob_id(there),
                    }
                )
            self._json(h, 200, {"files": answer, "commitOid": self.commit})
            return
        batch = re.fullmatch(r"/(.+?/[^/]+)\.git/info/lfs/objects/batch", path)
        if batch:
            repo = batch.group(1)
            if not self._may_write(h, "batch"):
                return
            objects = []
            for o in json.loads(body)["objects"]:
                row: dict[str, Any] = {"oid": o["oid"], "size": o["size"]}
                if o["oid"] not in self.lfs:
                    row["actions"] = {
                        "upload": {"href": f"{self.url}/lfs-objects/{o['oid']}"},
                        "verify": {
                            "href": f"{self.url}/{repo}.git/info/lfs/objects/verify"
                        },
                    }
                objects.append(row)
            self._json(h, 200, {"transfer": "basic", "objects": objects})
            return
        put = re.fullmatch(r"/lfs-objects/([0-9a-f]{64})", path)
        if put and h.command == "PUT":
            if hashlib.sha256(body).hexdigest() != put.group(1):
                self._error(h, 400, "BadDigest")
                return
            self.lfs[put.group(1)] = body
            self._json(h, 200, {})
            return
        if path.endswith(".git/info/lfs/objects/verify"):
            asked = json.loads(body)
            stored = self.lfs.get(asked["oid"])
            ok = stored is not None and len(stored) == asked["size"]
            self._json(h, 200 if ok else 404, {})
            return
        commit = re.fullmatch(r"/api/models/(.+?/[^/]+)/commit/([^/]+)", path)
        if commit:
            self._commit(h, commit.group(1), body)
            return
        self._error(h, 404, "EntryNotFound")

    def _commit(self, h: BaseHTTPRequestHandler, repo: str, body: bytes) -> None:
        if not self._may_write(h, "commit"):
            return
        if repo not in self.repos:
            self._error(h, 404, "RepoNotFound")
            return
        files = dict(self.repos[repo])
        summary, added = "", []
        for line in body.splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "header":
                summary = value["summary"]
            elif item["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
                added.append(value["path"])
            elif item["key"] == "lfsFile":
                if value["oid"] not in self.lfs:
                    self._error(h, 422, "LfsObjectMissing")
                    return
                files[value["path"]] = self.lfs[value["oid"]]
                added.append(value["path"])
            elif item["key"] == "deletedFile":
                files.pop(value["path"], None)
        self.repos[repo] = files  # the whole commit, or nothing
        sha = hashlib.sha1(body + repo.encode()).hexdigest()
        self.commits[repo] = sha
        self.pushes.append((repo, summary, added))
        self._json(
            h,
            200,
            {
                "commitUrl": f"{self.url}/{repo}/commit/{sha}",
                "commitOid": sha,
                "pullRequestUrl": None,
            },
        )

    def ranges(self, name: str) -> list[str | None]:
        """The Range headers of the GETs of ``name``."""
        return [
            r["range"]
            for r in self.requests
            if r["method"] == "GET" and r["path"].endswith("/" + name)
        ]


def git_blob_id(data: bytes) -> str:
    """git's id of a file's bytes: what the Hub lists as its ``blobId``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _etag(name: str, data: bytes) -> str:
    if name.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return git_blob_id(data)


def _sibling(name: str, data: bytes) -> dict[str, Any]:
    row: dict[str, Any] = {
        "rfilename": name,
        "size": len(data),
        "blobId": git_blob_id(data),
    }
    if name.endswith(LFS_SUFFIXES):
        sha = hashlib.sha256(data).hexdigest()
        row["lfs"] = {"sha256": sha, "size": len(data), "pointerSize": 134}
    return row
