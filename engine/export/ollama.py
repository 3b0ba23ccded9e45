"""A small Ollama REST client (stdlib ``urllib``) and one-call deployment.

``deploy_gguf`` uploads a GGUF (and optionally a LoRA adapter GGUF) as blobs,
creates the model with an explicit template and stop parameters, and checks it
with ``/api/show`` and a short ``/api/generate``. Without a reachable server it
writes a complete bundle folder (GGUF, Modelfile, README with the one-line
``ollama create`` command) and says so in the result.

Servers since v0.5.5 take ``files``/``adapters``/``template``/... in
``/api/create``; older ones take a Modelfile text whose ``FROM`` names the
uploaded blob (``@sha256:...``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.contract import DEFAULT_OLLAMA_HOST
from engine.errors import EngineError
from engine.export.modelfile import Modelfile, modelfile_for_gguf
from engine.store.atomic import temp_path

DEFAULT_HOST = DEFAULT_OLLAMA_HOST
FILES_API_VERSION = (0, 5, 5)
"""First Ollama version whose /api/create takes ``files`` instead of a Modelfile."""
K_QUANTS = ("q4_K_M", "q4_K_S", "q8_0")
"""What /api/create's ``quantize`` accepts (from an F16/BF16/F32 GGUF)."""

BUNDLE_ONLY_EXIT = 3
"""Exit code of a command that wrote an import bundle but deployed nothing."""

BytesProgress = Callable[[int, int, str], None]


class OllamaUnreachable(EngineError):
    """No Ollama server answers at the address."""


def sha256_file(path: Path, progress: BytesProgress | None = None) -> str:
    """``sha256:<hex>`` of a file, read in 4 MB blocks."""
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as f:
        while block := f.read(4 * 1024 * 1024):
            h.update(block)
            done += len(block)
            if progress is not None:
                progress(done, total, f"hashing {path.name}")
    return "sha256:" + h.hexdigest()


def parse_version(text: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", text.split("-")[0])
    return tuple(int(n) for n in nums[:3]) or (0,)


MAX_REPLY_BYTES = 8 * 2**20
"""Largest JSON reply the client reads (a model list, a ``show``)."""
MAX_LINE_BYTES = 2**20
"""Longest status line of a streamed reply."""
MAX_ERROR_BYTES = 64 * 1024
"""Most of an HTTP error body read for its message."""
SLOW_STEP_TIMEOUT_S = 600.0
"""Seconds an upload or a create (which may quantize) may go silent."""
DEFAULT_DEADLINE_S = 3600.0
"""Seconds a client may take in all, from its creation."""


class _ProgressReader:
    """A file object for http.client that reports bytes sent and stops the
    upload at the client's deadline."""

    def __init__(
        self, path: Path, progress: BytesProgress | None, check: Callable[[], float]
    ) -> None:
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._total = path.stat().st_size
        self._done = 0
        self._progress = progress
        self._check = check
        self._name = path.name

    def read(self, n: int = -1) -> bytes:
        self._check()
        data = self._f.read(n if n and n > 0 else 1024 * 1024)
        self._done += len(data)
        if self._progress is not None and data:
            self._progress(self._done, self._total, f"uploading {self._name}")
        return data

    def close(self) -> None:
        self._f.close()


@dataclass
class _Reply:
    """An open response, its socket (for per-read timeouts) and connection."""

    resp: http.client.HTTPResponse
    sock: socket.socket
    conn: http.client.HTTPConnection

    def __enter__(self) -> _Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        self.resp.close()
        self.conn.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(getattr(exc, "strerror", None) or exc or type(exc).__name__)


@dataclass
class OllamaClient:
    """Ollama's REST API at ``host``; every failure is one ``EngineError``
    naming the step that failed (connect, upload, create, show, ...).

    ``OllamaUnreachable`` means that nothing answered at all; a server that
    answered once and then fails is reported as such.
    """

    host: str = DEFAULT_HOST
    timeout: float = 10.0
    """Seconds to wait for a connection or for the next bytes of a reply."""
    deadline_s: float = DEFAULT_DEADLINE_S
    """Seconds this client may take in all, from its creation."""

    def __post_init__(self) -> None:
        host = self.host.strip().rstrip("/")
        if not re.match(r"^https?://", host):
            host = "http://" + host
        self.host = host
        self._end = time.monotonic() + self.deadline_s
        self._answered = False

    # -- plumbing ----------------------------------------------------------

    def _left(self, step: str) -> float:
        """Seconds left before the deadline; an EngineError once it passed."""
        left = self._end - time.monotonic()
        if left <= 0:
            raise EngineError(
                f"Ollama at {self.host} did not finish {step} within the "
                f"{self.deadline_s:g} s deadline."
            )
        return left

    def _wait(self, step: str, timeout: float | None = None) -> float:
        return min(timeout or self.timeout, self._left(step))

    def _transport_error(self, exc: BaseException, step: str) -> EngineError:
        """One sentence for a failure below HTTP's status codes."""
        if isinstance(exc, EngineError):
            return exc
        if isinstance(exc, TimeoutError) and self._end - time.monotonic() <= 0.01:
            return EngineError(
                f"Ollama at {self.host} did not finish {step} within the "
                f"{self.deadline_s:g} s deadline."
            )
        if isinstance(exc, TimeoutError):
            return EngineError(
                f"Ollama at {self.host} went silent during {step} (nothing for "
                f"{self.timeout:g} s or more)."
            )
        if isinstance(exc, http.client.RemoteDisconnected):
            return EngineError(
                f"The server at {self.host} closed the connection during {step} "
                "without answering."
            )
        if isinstance(exc, http.client.IncompleteRead):
            return EngineError(
                f"The reply of Ollama at {self.host} to {step} broke off after "
                f"{len(exc.partial)} bytes."
            )
        if isinstance(exc, http.client.HTTPException):
            return EngineError(
                f"The server at {self.host} did not answer {step} in HTTP; is it an "
                "Ollama server?"
            )
        return EngineError(
            f"The connection to Ollama at {self.host} broke off during {step} "
            f"({_reason(exc)})."
        )

    def _open(
        self,
        method: str,
        path: str,
        body: Any,
        step: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> _Reply:
        """Send a request and read the status line and headers. The caller
        reads the body (with ``_read``) and closes the reply."""
        parts = urllib.parse.urlsplit(self.host)
        conn_cls = (
            http.client.HTTPSConnection
            if parts.scheme == "https"
            else http.client.HTTPConnection
        )
        try:
            conn = conn_cls(
                parts.hostname or "", parts.port, timeout=self._wait(step, timeout)
            )
        except ValueError:
            raise EngineError(
                f"{self.host} is not an address Ollama can have."
            ) from None
        conn.blocksize = 1024 * 1024
        data: Any = None
        hdrs = dict(headers or {})
        if body is not None and not hasattr(body, "read"):
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif body is not None:
            data = body
        try:
            conn.connect()
        # refused, unreachable, unknown name, timed out; UnicodeError: a host
        # name the lookup cannot encode
        except (OSError, UnicodeError) as exc:
            conn.close()
            if self._answered:
                raise EngineError(
                    f"The Ollama server at {self.host} stopped answering during "
                    f"{step} ({_reason(exc)})."
                ) from None
            raise OllamaUnreachable(
                f"No Ollama server answers at {self.host} ({_reason(exc)}); start "
                "it with `ollama serve` or check the address."
            ) from None
        sock = conn.sock
        assert sock is not None
        try:
            conn.request(method, parts.path + path, body=data, headers=hdrs)
            sock.settimeout(self._wait(step, timeout))
            resp = conn.getresponse()
        except Exception as exc:
            conn.close()
            raise self._transport_error(exc, step) from None
        self._answered = True
        return _Reply(resp, sock, conn)

    def _read(
        self,
        resp: http.client.HTTPResponse,
        sock: socket.socket,
        step: str,
        limit: int,
        timeout: float | None = None,
    ) -> bytes:
        """The whole body, at most ``limit`` bytes, each block within the
        timeout and all of it within the deadline."""
        if resp.length is not None and resp.length > limit:
            raise EngineError(
                f"Ollama at {self.host} answered {step} with {resp.length} bytes, "
                f"more than the {limit} a reply may have."
            )
        chunks: list[bytes] = []
        got = 0
        try:
            while True:
                sock.settimeout(self._wait(step, timeout))
                block = resp.read1(64 * 1024)
                if not block:
                    break
                got += len(block)
                if got > limit:
                    raise EngineError(
                        f"Ollama at {self.host} answered {step} with more than the "
                        f"{limit} bytes a reply may have."
                    )
                chunks.append(block)
        except EngineError:
            raise
        except Exception as exc:
            raise self._transport_error(exc, step) from None
        if resp.length:  # the server promised more than it sent
            raise EngineError(
                f"The reply of Ollama at {self.host} to {step} broke off after "
                f"{got} bytes, {resp.length} short."
            )
        return b"".join(chunks)

    def _error_text(
        self, resp: http.client.HTTPResponse, sock: socket.socket, step: str
    ) -> str:
        try:
            raw = self._read(resp, sock, step, MAX_ERROR_BYTES).decode(
                "utf-8", "replace"
            )
        except EngineError:
            raw = ""
        with contextlib.suppress(ValueError, AttributeError, RecursionError):
            err = json.loads(raw).get("error")
            if err:
                return str(err)[:500]
        return raw.strip()[:500] or f"HTTP {resp.status} {resp.reason}"

    def _json(
        self, method: str, path: str, step: str, body: Any = None, what: str = ""
    ) -> dict[str, Any]:
        """A JSON object reply; ``what`` names the model a 404 is about."""
        reply = self._open(method, path, body, step)
        with reply:
            resp, sock = reply.resp, reply.sock
            if resp.status >= 400:
                msg = self._error_text(resp, sock, step)
                if resp.status == 404 and what:
                    raise EngineError(
                        f"Ollama at {self.host} has no model named {what}."
                    )
                raise EngineError(
                    f"Ollama at {self.host} refused {step}: {msg.rstrip('.')}."
                )
            raw = self._read(resp, sock, step, MAX_REPLY_BYTES)
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise EngineError(
                f"Ollama at {self.host} answered {step} with something that is not "
                "JSON."
            ) from None
        if not isinstance(data, dict):
            raise EngineError(
                f"Ollama at {self.host} answered {step} with JSON that is not an "
                "object."
            )
        return data

    # -- API ---------------------------------------------------------------

    def version(self) -> str:
        """The server version; raises ``OllamaUnreachable`` when none answers."""
        data = self._json("GET", "/api/version", "connect")
        version = data.get("version")
        if not isinstance(version, str):
            raise EngineError(
                f"The server at {self.host} answered connect without an Ollama "
                "version; is it an Ollama server?"
            )
        return version

    def available(self) -> str | None:
        """The server version, or None when no server answers."""
        try:
            return self.version()
        except OllamaUnreachable:
            return None

    def has_blob(self, digest: str) -> bool:
        reply = self._open("HEAD", f"/api/blobs/{digest}", None, "upload")
        with reply:
            resp, sock = reply.resp, reply.sock
            if resp.status == 404:
                return False
            if resp.status >= 400:
                raise EngineError(
                    f"Ollama at {self.host} could not check blob {digest[:19]} during "
                    f"upload: {self._error_text(resp, sock, 'upload').rstrip('.')}."
                )
        return True

    def push_blob(
        self,
        path: Path,
        digest: str | None = None,
        progress: BytesProgress | None = None,
    ) -> tuple[str, bool]:
        """Upload ``path`` unless the server has it. Returns (digest, uploaded)."""
        path = Path(path)
        digest = digest or sha256_file(path)
        size = path.stat().st_size
        if self.has_blob(digest):
            if progress is not None:
                progress(size, size, f"{path.name} already on the server")
            return digest, False
        reader = _ProgressReader(path, progress, lambda: self._left("upload"))
        try:
            reply = self._open(
                "POST",
                f"/api/blobs/{digest}",
                reader,
                "upload",
                headers={
                    "Content-Length": str(size),
                    "Content-Type": "application/octet-stream",
                },
                timeout=max(self.timeout, SLOW_STEP_TIMEOUT_S),
            )
        finally:
            reader.close()
        with reply:
            resp, sock = reply.resp, reply.sock
            if resp.status >= 400:
                raise EngineError(
                    f"Ollama refused the upload of {path.name}: "
                    f"{self._error_text(resp, sock, 'upload').rstrip('.')}."
                )
            self._read(resp, sock, "upload", MAX_ERROR_BYTES)
        return digest, True

    def _stream(
        self, path: str, body: dict[str, Any], step: str, what: str
    ) -> Iterator[dict[str, Any]]:
        """The JSON lines of a streamed reply; an ``error`` line raises."""
        timeout = max(self.timeout, SLOW_STEP_TIMEOUT_S)
        reply = self._open("POST", path, body, step, timeout=timeout)
        with reply:
            resp, sock = reply.resp, reply.sock
            if resp.status >= 400:
                text = self._error_text(resp, sock, step)
                raise EngineError(f"{what}: {text.rstrip('.')}.")
            broke_off = EngineError(
                f"{what}: the connection to {self.host} broke off before the server "
                "said it was done."
            )
            while True:
                try:
                    sock.settimeout(self._wait(step, timeout))
                    line = resp.readline(MAX_LINE_BYTES + 1)
                except EngineError:
                    raise
                except (http.client.IncompleteRead, ConnectionError):
                    raise broke_off from None
                except Exception as exc:
                    raise self._transport_error(exc, step) from None
                if not line:
                    # A chunked reply still waiting for its last chunk, or a
                    # sized one with bytes still to come, was cut short.
                    chunked = getattr(resp, "chunked", False)
                    if (chunked and getattr(resp, "chunk_left", None) is not None) or (
                        not chunked and (resp.length or 0) > 0
                    ):
                        raise broke_off
                    return
                if len(line) > MAX_LINE_BYTES:
                    raise EngineError(
                        f"{what}: the server sent a status line of more than "
                        f"{MAX_LINE_BYTES} bytes."
                    )
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError):
                    raise EngineError(
                        f"{what}: the server sent a status line that is not JSON."
                    ) from None
                if not isinstance(obj, dict):
                    raise EngineError(
                        f"{what}: the server sent a status line that is not a JSON "
                        "object."
                    )
                if obj.get("error"):
                    raise EngineError(f"{what}: {str(obj['error'])[:500].rstrip('.')}.")
                yield obj

    def create(
        self,
        name: str,
        *,
        files: Mapping[str, str] | None = None,
        adapters: Mapping[str, str] | None = None,
        from_model: str | None = None,
        template: str | None = None,
        system: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        quantize: str | None = None,
        modelfile: str | None = None,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[str]:
        """POST /api/create and follow the status stream to ``success``.
        ``modelfile`` selects the pre-0.5.5 form. Returns the statuses seen."""
        body: dict[str, Any] = {"model": name, "stream": True}
        if modelfile is not None:
            body["name"] = name
            body["modelfile"] = modelfile
        else:
            if files:
                body["files"] = dict(files)
            if from_model:
                body["from"] = from_model
            if adapters:
                body["adapters"] = dict(adapters)
            if template:
                body["template"] = template
            if system:
                body["system"] = system
            if parameters:
                body["parameters"] = dict(parameters)
        if quantize:
            body["quantize"] = quantize
        statuses: list[str] = []
        what = f"Ollama could not create {name}"
        for obj in self._stream("/api/create", body, "create", what):
            status = str(obj.get("status", ""))[:200]
            statuses.append(status)
            if on_status is not None:
                on_status(obj)
            if status == "success":
                return statuses
        raise EngineError(f"{what}: the status stream ended without success.")

    def show(self, name: str) -> dict[str, Any]:
        return self._json("POST", "/api/show", "show", {"model": name}, what=name)

    def generate(self, name: str, prompt: str, num_predict: int = 16) -> str:
        data = self._json(
            "POST",
            "/api/generate",
            "generate",
            {
                "model": name,
                "prompt": prompt,
                "stream": False,
                "options": {"num_predict": num_predict, "temperature": 0},
            },
            what=name,
        )
        return str(data.get("response", ""))

    def chat(self, name: str, messages: list[dict[str, str]]) -> str:
        """One non-streamed ``/api/chat`` turn; the assistant's answer."""
        data = self._json(
            "POST",
            "/api/chat",
            "chat",
            {"model": name, "messages": messages, "stream": False},
            what=name,
        )
        message = data.get("message")
        return str(message.get("content", "")) if isinstance(message, dict) else ""

    def list_models(self) -> list[dict[str, Any]]:
        models = self._json("GET", "/api/tags", "list").get("models", [])
        if not isinstance(models, list):
            raise EngineError(
                f"Ollama at {self.host} answered list without a list of models."
            )
        return [m for m in models if isinstance(m, dict)]

    def delete(self, name: str) -> None:
        self._json("DELETE", "/api/delete", "delete", {"model": name}, what=name)


# --------------------------------------------------------------------------
# deployment


_NAME_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)?(:[A-Za-z0-9._-]+)?$"
)


def check_host(url: str) -> str:
    """``url`` if it can address an Ollama server (``http(s)://host[:port]``,
    the scheme may be left out); else an EngineError naming it."""
    problem = (
        f"The Ollama address {str(url)[:200]!r} is not an http:// or https:// URL."
    )
    if not isinstance(url, str) or any(
        c.isspace() or not c.isprintable() for c in url.strip()
    ):
        raise EngineError(problem)
    url = url.strip()
    full = url if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", url) else "http://" + url
    try:
        parts = urllib.parse.urlsplit(full)
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        raise EngineError(problem) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(problem)
    try:
        parts.hostname.encode("idna")  # what the name lookup will do
    except UnicodeError:
        raise EngineError(
            f"The Ollama address {url[:200]!r} has a host name that cannot be "
            "looked up (a part is empty or longer than 63 characters)."
        ) from None
    return url


def check_model_name(name: str) -> str:
    name = name.strip()
    if not name or not _NAME_RE.match(name):
        raise EngineError(
            f"{name!r} is not a valid Ollama model name; use letters, digits, '.', "
            "'-', "
            "'_' and an optional ':tag'."
        )
    return name


@dataclass
class DeployResult:
    """What ``deploy_gguf`` did."""

    name: str
    deployed: bool
    """True when the model now exists on the server."""
    host: str
    server_version: str | None
    modelfile: str
    family: str | None
    command: str
    """``ollama create NAME -f Modelfile`` (bundle) or ``ollama run NAME``."""
    bundle_dir: str | None = None
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Blobs the server already had."""
    statuses: list[str] = field(default_factory=list)
    sample: str | None = None
    """A short generate answer from the new model."""
    message: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


OLLAMA_MODEL_KIND = "ollama"
"""The kind of a project model that lives on an Ollama server."""


def file_stem(name: str) -> str:
    """An Ollama model name (``family/model:tag``) as one file-name part."""
    return name.replace(":", "-").replace("/", "-")


def deployed_model_entry(
    result: DeployResult, folder: Path, parents: list[str]
) -> dict[str, Any]:
    """The project model entry of a model ``result`` deployed: its Ollama
    name and server (the metrics an agent version reads), stored as a small
    ``NAME-ollama.json`` with the same facts in ``folder`` (a model row needs
    a file), the GGUF it came from as parent."""
    from engine.contract import atomic_write_json

    facts = {"ollama_model": result.name, "host": result.host}
    file = folder / f"{file_stem(result.name)}-ollama.json"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(file, facts)
    return {
        "name": result.name,
        "kind": OLLAMA_MODEL_KIND,
        "file": str(file.resolve()),
        "parents": parents,
        "metrics": {**facts, "family": result.family or "unknown"},
    }


def _place(src: Path, dest: Path) -> None:
    """Hard-link or copy ``src`` to ``dest`` atomically."""
    if dest.exists() and dest.stat().st_size == src.stat().st_size:
        with contextlib.suppress(OSError):
            if os.path.samefile(src, dest):
                return
    tmp = temp_path(dest)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise EngineError(f"Could not write {dest}: {exc.strerror or exc}.") from None


def write_bundle(
    bundle_dir: Path,
    name: str,
    gguf_path: Path,
    modelfile_builder: Callable[[str, str | None], Modelfile],
    adapter_path: Path | None = None,
    quantize: str | None = None,
) -> tuple[Path, Modelfile, str]:
    """A folder ``ollama create`` can use as is: the GGUF(s), Modelfile, README.

    Each file is written atomically, and the set is all or nothing: when one
    fails (a full disk) the files this call wrote are removed again, and the
    folder too if this call made it, so no bundle lacking its Modelfile stays.
    """
    from engine.store.atomic import atomic_write_text

    made_dir = not bundle_dir.exists()
    written: list[Path] = []

    def place(src: Path, dest: Path) -> None:
        existed = dest.exists()
        _place(src, dest)
        if not existed:
            written.append(dest)

    def write_text(dest: Path, text: str) -> None:
        existed = dest.exists()
        atomic_write_text(dest, text)
        if not existed:
            written.append(dest)

    try:
        bundle_dir.mkdir(parents=True, exist_ok=True)
        model_file = bundle_dir / gguf_path.name
        place(gguf_path, model_file)
        adapter_ref = None
        if adapter_path is not None:
            adapter_file = bundle_dir / adapter_path.name
            place(adapter_path, adapter_file)
            adapter_ref = f"./{adapter_file.name}"
        mf = modelfile_builder(f"./{model_file.name}", adapter_ref)
        write_text(bundle_dir / "Modelfile", mf.text)
        command = f"ollama create {name} -f Modelfile" + (
            f" --quantize {quantize}" if quantize else ""
        )
        readme = (
            f"# {name}\n\n"
            f"Import into Ollama from this folder with: `{command}`, then `ollama "
            f"run {name}`.\n"
        )
        write_text(bundle_dir / "README.md", readme)
    except (OSError, EngineError) as exc:
        for f in written:
            with contextlib.suppress(OSError):
                f.unlink()
        if made_dir:
            shutil.rmtree(bundle_dir, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise EngineError(
                f"The disk holding {bundle_dir} is full; free about "
                f"{max(1, round(gguf_path.stat().st_size / 1e6))} MB and write the "
                "Ollama bundle again."
            ) from None
        if isinstance(exc, OSError):
            raise EngineError(
                f"Could not write the Ollama bundle in {bundle_dir}: "
                f"{exc.strerror or exc}."
            ) from None
        raise
    return bundle_dir, mf, command


def deploy_gguf(
    gguf_path: str | os.PathLike[str],
    name: str,
    *,
    host: str | None = None,
    system: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    quantize: str | None = None,
    adapter_path: str | os.PathLike[str] | None = None,
    family: str | None = None,
    bundle_dir: str | os.PathLike[str] | None = None,
    always_bundle: bool = False,
    verify_prompt: str | None = "Hello",
    progress: BytesProgress | None = None,
    timeout: float = 10.0,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> DeployResult:
    """Create Ollama model ``name`` from a GGUF (plus an optional LoRA adapter
    GGUF), or write a bundle folder when no server answers at ``host``.

    Without a server the bundle goes to ``bundle_dir`` (default
    ``<gguf folder>/<name>-ollama``); with ``always_bundle`` it is written
    after a successful deployment too. ``quantize`` (``q4_K_M``, ``q4_K_S``,
    ``q8_0``) asks the server to quantize an F16/BF16/F32 GGUF. Each step
    (connect, upload, create, show) waits at most ``timeout`` seconds for the
    server's next bytes, and the whole deployment at most ``deadline_s``.
    """
    gguf_file = Path(gguf_path)
    if not gguf_file.is_file():
        raise EngineError(f"The GGUF file {gguf_file} does not exist.")
    adapter_file = Path(adapter_path) if adapter_path else None
    if adapter_file is not None and not adapter_file.is_file():
        raise EngineError(f"The adapter GGUF {adapter_file} does not exist.")
    name = check_model_name(name)
    if quantize is not None and quantize not in K_QUANTS:
        raise EngineError(
            f"Ollama cannot quantize to {quantize!r}; choose one of "
            f"{', '.join(K_QUANTS)}."
        )
    from engine.export.gguf import read_gguf_summary

    summary = read_gguf_summary(gguf_file)
    if summary["type"] == "adapter":
        raise EngineError(
            f"{gguf_file.name} is a LoRA adapter; deploy the base model GGUF with "
            "the adapter as adapter_path."
        )
    warnings: list[str] = []
    if quantize and summary["file_type"] not in (0, 1, 32):
        raise EngineError(
            f"Ollama quantizes only F16, BF16 or F32 GGUFs; {gguf_file.name} is "
            "already "
            "quantized, export it as F16."
        )

    def builder(from_ref: str, adapter_ref: str | None) -> Modelfile:
        return modelfile_for_gguf(
            str(gguf_file),
            from_ref=from_ref,
            adapter=adapter_ref,
            system=system,
            parameters=parameters,
            family=family,
        )

    client = OllamaClient(host or DEFAULT_HOST, timeout=timeout, deadline_s=deadline_s)
    version = client.available()
    if version is None:
        safe = re.sub(r"[^A-Za-z0-9._-]", "-", name)
        target = Path(bundle_dir) if bundle_dir else gguf_file.parent / f"{safe}-ollama"
        folder, mf, command = write_bundle(
            target, name, gguf_file, builder, adapter_file, quantize
        )
        return DeployResult(
            name=name,
            deployed=False,
            host=client.host,
            server_version=None,
            modelfile=mf.text,
            family=mf.family,
            command=command,
            bundle_dir=str(folder),
            message=(
                f"No Ollama server answers at {client.host}; wrote a bundle to "
                f"{folder}: "
                f"run `{command}` there."
            ),
            warnings=warnings + mf.warnings,
        )

    uploaded: list[str] = []
    skipped: list[str] = []
    digests: dict[Path, str] = {}
    for f in [gguf_file] + ([adapter_file] if adapter_file else []):
        digest, sent = client.push_blob(f, progress=progress)
        digests[f] = digest
        (uploaded if sent else skipped).append(f.name)

    statuses: list[str]
    if parse_version(version) >= FILES_API_VERSION:
        mf = builder(str(gguf_file), str(adapter_file) if adapter_file else None)
        statuses = client.create(
            name,
            files={gguf_file.name: digests[gguf_file]},
            adapters={adapter_file.name: digests[adapter_file]}
            if adapter_file
            else None,
            template=mf.template,
            system=mf.system,
            parameters=mf.parameters or None,
            quantize=quantize,
        )
    else:
        mf = builder(
            "@" + digests[gguf_file],
            ("@" + digests[adapter_file]) if adapter_file else None,
        )
        statuses = client.create(name, modelfile=mf.text, quantize=quantize)
    warnings += mf.warnings

    sample = None
    try:
        client.show(name)
        if verify_prompt:
            sample = client.generate(name, verify_prompt, num_predict=8)
    except EngineError as exc:
        # The model exists now; say so, and what went wrong after.
        text = str(exc)
        raise EngineError(
            f"Ollama created {name} at {client.host}, but checking it failed: "
            f"{text[:1].lower() + text[1:]}"
        ) from None

    bundle = None
    if always_bundle and bundle_dir is not None:
        bundle, _, _ = write_bundle(
            Path(bundle_dir), name, gguf_file, builder, adapter_file, quantize
        )
    return DeployResult(
        name=name,
        deployed=True,
        host=client.host,
        server_version=version,
        modelfile=mf.text,
        family=mf.family,
        command=f"ollama run {name}",
        bundle_dir=str(bundle) if bundle else None,
        uploaded=uploaded,
        skipped=skipped,
        statuses=statuses,
        sample=sample,
        message=f"Created {name} on Ollama {version} at {client.host}: "
        f"`ollama run {name}`.",
        warnings=warnings,
    )
