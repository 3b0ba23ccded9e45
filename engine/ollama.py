"""A small Ollama REST client (stdlib ``urllib``): the one the export's
deployment, the engine's Ollama requests, the LLM judge and the agent service
all speak to a server through.

Every failure is one ``EngineError`` naming the step that failed; nothing
answering at all is ``OllamaUnreachable``.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.contract import DEFAULT_OLLAMA_HOST
from engine.errors import EngineError
from engine.progress import Progress

DEFAULT_HOST = DEFAULT_OLLAMA_HOST
FILES_API_VERSION = (0, 5, 5)
"""First Ollama version whose /api/create takes ``files`` instead of a Modelfile."""
K_QUANTS = ("q4_K_M", "q4_K_S", "q8_0")
"""What /api/create's ``quantize`` accepts (from an F16/BF16/F32 GGUF)."""


_TRANSPORT_FAILURES: tuple[tuple[type[BaseException], str], ...] = (
    (
        TimeoutError,
        "Ollama at {host} went silent during {step} (nothing for {timeout:g} s "
        "or more).",
    ),
    (
        http.client.RemoteDisconnected,
        "The server at {host} closed the connection during {step} without answering.",
    ),
    (
        http.client.IncompleteRead,
        "The reply of Ollama at {host} to {step} broke off after {got} bytes.",
    ),
    (
        http.client.HTTPException,
        "The server at {host} did not answer {step} in HTTP; is it an Ollama server?",
    ),
)
"""A failure below HTTP's status codes, by its exception (the first that
matches: a dropped connection is also an HTTP exception), as one sentence."""


class OllamaUnreachable(EngineError):
    """No Ollama server answers at the address."""


def sha256_file(path: Path, progress: Progress | None = None) -> str:
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
        self, path: Path, progress: Progress | None, check: Callable[[], float]
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
            raise self._past_deadline(step)
        return left

    def _past_deadline(self, step: str) -> EngineError:
        return EngineError(
            f"Ollama at {self.host} did not finish {step} within the "
            f"{self.deadline_s:g} s deadline."
        )

    def _wait(self, step: str, timeout: float | None = None) -> float:
        return min(timeout or self.timeout, self._left(step))

    def _transport_error(self, exc: BaseException, step: str) -> EngineError:
        """One sentence for a failure below HTTP's status codes."""
        if isinstance(exc, EngineError):
            return exc
        if isinstance(exc, TimeoutError) and self._end - time.monotonic() <= 0.01:
            return self._past_deadline(step)
        for kind, sentence in _TRANSPORT_FAILURES:
            if isinstance(exc, kind):
                return EngineError(
                    sentence.format(
                        host=self.host,
                        step=step,
                        timeout=self.timeout,
                        got=len(getattr(exc, "partial", b"")),
                    )
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
        progress: Progress | None = None,
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
            given = {
                "files": files,
                "from": from_model,
                "adapters": adapters,
                "template": template,
                "system": system,
                "parameters": parameters,
            }
            # The fields given, as plain JSON (a mapping copied to a dict).
            body |= {
                key: dict(value) if isinstance(value, Mapping) else value
                for key, value in given.items()
                if value
            }
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
        return str(self.chat_turn(name, messages)["reply"])

    def chat_turn(self, name: str, messages: list[dict[str, str]]) -> dict[str, Any]:
        """One non-streamed ``/api/chat`` turn: ``{"reply", "tokens",
        "seconds", "load_seconds"}`` from Ollama's own counts (durations in
        nanoseconds; a count it leaves out is 0)."""
        data = self._json(
            "POST",
            "/api/chat",
            "chat",
            {"model": name, "messages": messages, "stream": False},
            what=name,
        )
        message = data.get("message")

        def number(key: str, scale: float = 1.0) -> float:
            value = data.get(key)
            return float(value) * scale if isinstance(value, int | float) else 0.0

        reply = message.get("content", "") if isinstance(message, dict) else ""
        return {
            "reply": str(reply),
            "tokens": int(number("eval_count")),
            "seconds": number("eval_duration", 1e-9),
            "load_seconds": number("load_duration", 1e-9),
        }

    def list_models(self) -> list[dict[str, Any]]:
        models = self._json("GET", "/api/tags", "list").get("models", [])
        if not isinstance(models, list):
            raise EngineError(
                f"Ollama at {self.host} answered list without a list of models."
            )
        return [m for m in models if isinstance(m, dict)]

    def delete(self, name: str) -> None:
        self._json("DELETE", "/api/delete", "delete", {"model": name}, what=name)


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
