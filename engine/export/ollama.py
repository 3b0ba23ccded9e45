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
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.export.modelfile import Modelfile, modelfile_for_gguf
from engine.store.atomic import TMP_MARK

DEFAULT_HOST = "http://127.0.0.1:11434"
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


class _ProgressReader:
    """A file object for http.client that reports bytes sent."""

    def __init__(self, path: Path, progress: BytesProgress | None) -> None:
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._total = path.stat().st_size
        self._done = 0
        self._progress = progress
        self._name = path.name

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n if n and n > 0 else 1024 * 1024)
        self._done += len(data)
        if self._progress is not None and data:
            self._progress(self._done, self._total, f"uploading {self._name}")
        return data

    def close(self) -> None:
        self._f.close()


@dataclass
class OllamaClient:
    """Ollama's REST API at ``host``; every failure is one ``EngineError``."""

    host: str = DEFAULT_HOST
    timeout: float = 10.0
    """Seconds to wait for a connection or a reply line."""

    def __post_init__(self) -> None:
        host = self.host.strip().rstrip("/")
        if not re.match(r"^https?://", host):
            host = "http://" + host
        self.host = host

    # -- plumbing ----------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        url = self.host + path
        data: Any = None
        hdrs = dict(headers or {})
        if body is not None and not hasattr(body, "read"):
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif body is not None:
            data = body
        req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError:
            raise
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise OllamaUnreachable(
                f"No Ollama server answers at {self.host} ({reason}); start it with "
                "`ollama serve` or check the address."
            ) from None

    @staticmethod
    def _error_text(exc: urllib.error.HTTPError) -> str:
        try:
            raw = exc.read().decode("utf-8", "replace")
        except Exception:
            raw = ""
        with contextlib.suppress(ValueError, AttributeError):
            err = json.loads(raw).get("error")
            if err:
                return str(err)
        return raw.strip() or f"HTTP {exc.code} {exc.reason}"

    def _json(self, method: str, path: str, body: Any = None, what: str = "") -> Any:
        try:
            with self._request(method, path, body) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            msg = self._error_text(exc)
            if exc.code == 404 and what:
                raise EngineError(
                    f"Ollama at {self.host} has no model named {what}."
                ) from None
            raise EngineError(
                f"Ollama {method} {path} failed: {msg.rstrip('.')}."
            ) from None
        return json.loads(raw) if raw.strip() else {}

    # -- API ---------------------------------------------------------------

    def version(self) -> str:
        """The server version; raises ``OllamaUnreachable`` when none answers."""
        data = self._json("GET", "/api/version")
        return str(data.get("version", "0"))

    def available(self) -> str | None:
        """The server version, or None when no server answers."""
        try:
            return self.version()
        except OllamaUnreachable:
            return None

    def has_blob(self, digest: str) -> bool:
        try:
            with self._request("HEAD", f"/api/blobs/{digest}"):
                return True
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise EngineError(
                f"Ollama could not check blob {digest[:19]}: {self._error_text(exc)}."
            ) from None

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
        reader = _ProgressReader(path, progress)
        try:
            with self._request(
                "POST",
                f"/api/blobs/{digest}",
                reader,
                headers={
                    "Content-Length": str(size),
                    "Content-Type": "application/octet-stream",
                },
                timeout=max(self.timeout, 600.0),
            ):
                pass
        except urllib.error.HTTPError as exc:
            raise EngineError(
                f"Ollama refused the upload of {path.name}: {self._error_text(exc)}."
            ) from None
        finally:
            reader.close()
        return digest, True

    def _stream(
        self, path: str, body: dict[str, Any], what: str
    ) -> Iterator[dict[str, Any]]:
        try:
            resp = self._request("POST", path, body, timeout=max(self.timeout, 600.0))
        except urllib.error.HTTPError as exc:
            raise EngineError(f"{what}: {self._error_text(exc).rstrip('.')}.") from None
        broke_off = EngineError(
            f"{what}: the connection to {self.host} broke off before the server "
            "said it was done."
        )
        with resp:
            lines = iter(resp)
            while True:
                try:
                    line = next(lines)
                except StopIteration:
                    # http.client ends a truncated body quietly when read by
                    # lines: a chunked reply still waits for its last chunk, a
                    # sized one still has bytes to come.
                    chunked = getattr(resp, "chunked", False)
                    if (chunked and getattr(resp, "chunk_left", None) is not None) or (
                        not chunked and (getattr(resp, "length", 0) or 0) > 0
                    ):
                        raise broke_off from None
                    return
                except (http.client.HTTPException, OSError):
                    # The server went away mid-stream (crash, restart, proxy).
                    raise broke_off from None
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if obj.get("error"):
                    raise EngineError(f"{what}: {str(obj['error']).rstrip('.')}.")
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
        for obj in self._stream("/api/create", body, f"Ollama could not create {name}"):
            status = str(obj.get("status", ""))
            statuses.append(status)
            if on_status is not None:
                on_status(obj)
            if status == "success":
                return statuses
        raise EngineError(
            f"Ollama could not create {name}: the status stream ended without success."
        )

    def show(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json(
            "POST", "/api/show", {"model": name}, what=name
        )
        return result

    def generate(self, name: str, prompt: str, num_predict: int = 16) -> str:
        try:
            data = self._json(
                "POST",
                "/api/generate",
                {
                    "model": name,
                    "prompt": prompt,
                    "stream": False,
                    "options": {"num_predict": num_predict, "temperature": 0},
                },
                what=name,
            )
        except OllamaUnreachable:
            raise
        return str(data.get("response", ""))

    def chat(self, name: str, messages: list[dict[str, str]]) -> str:
        """One non-streamed ``/api/chat`` turn; the assistant's answer."""
        data = self._json(
            "POST",
            "/api/chat",
            {"model": name, "messages": messages, "stream": False},
            what=name,
        )
        return str((data.get("message") or {}).get("content", ""))

    def list_models(self) -> list[dict[str, Any]]:
        models: list[dict[str, Any]] = self._json("GET", "/api/tags").get("models", [])
        return models

    def delete(self, name: str) -> None:
        self._json("DELETE", "/api/delete", {"model": name}, what=name)


# --------------------------------------------------------------------------
# deployment


_NAME_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)?(:[A-Za-z0-9._-]+)?$"
)


def check_host(url: str) -> str:
    """``url`` if it can address an Ollama server (``http(s)://host[:port]``,
    the scheme may be left out); else an EngineError naming it."""
    problem = f"The Ollama address {url[:200]!r} is not an http:// or https:// URL."
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


def _place(src: Path, dest: Path) -> None:
    """Hard-link or copy ``src`` to ``dest`` atomically."""
    if dest.exists() and dest.stat().st_size == src.stat().st_size:
        with contextlib.suppress(OSError):
            if os.path.samefile(src, dest):
                return
    tmp = dest.with_name(f".{dest.name}{TMP_MARK}{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
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
) -> DeployResult:
    """Create Ollama model ``name`` from a GGUF (plus an optional LoRA adapter
    GGUF), or write a bundle folder when no server answers at ``host``.

    Without a server the bundle goes to ``bundle_dir`` (default
    ``<gguf folder>/<name>-ollama``); with ``always_bundle`` it is written
    after a successful deployment too. ``quantize`` (``q4_K_M``, ``q4_K_S``,
    ``q8_0``) asks the server to
    quantize an F16/BF16/F32 GGUF.
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

    client = OllamaClient(host or DEFAULT_HOST, timeout=timeout)
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

    client.show(name)
    sample = None
    if verify_prompt:
        sample = client.generate(name, verify_prompt, num_predict=8)

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
