"""One-call deployment of a GGUF to Ollama, through ``engine.ollama``'s client.

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
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.export.modelfile import Modelfile, modelfile_for_gguf
from engine.ollama import (
    DEFAULT_DEADLINE_S,
    DEFAULT_HOST,
    FILES_API_VERSION,
    K_QUANTS,
    OllamaClient,
    check_model_name,
    parse_version,
)
from engine.progress import Progress
from engine.store.atomic import temp_path

BUNDLE_ONLY_EXIT = 3
"""Exit code of a command that wrote an import bundle but deployed nothing."""


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
    progress: Progress | None = None,
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
    adapter_file = Path(adapter_path) if adapter_path else None
    name = _check_deploy_input(gguf_file, adapter_file, name, quantize)

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
        return _bundle_instead(
            client.host, target, name, gguf_file, builder, adapter_file, quantize
        )

    files = [gguf_file] + ([adapter_file] if adapter_file else [])
    digests, uploaded, skipped = _push_blobs(client, files, progress)
    mf, statuses = _create_model(
        client, version, name, builder, gguf_file, adapter_file, digests, quantize
    )
    sample = _check_created(client, name, verify_prompt)
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
        warnings=list(mf.warnings),
    )


def _check_deploy_input(
    gguf_file: Path, adapter_file: Path | None, name: str, quantize: str | None
) -> str:
    """The checked model name; refuses missing files, an adapter given as the
    model, and a quantization Ollama cannot do, before contacting anything."""
    if not gguf_file.is_file():
        raise EngineError(f"The GGUF file {gguf_file} does not exist.")
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
    if quantize and summary["file_type"] not in (0, 1, 32):
        raise EngineError(
            f"Ollama quantizes only F16, BF16 or F32 GGUFs; {gguf_file.name} is "
            "already "
            "quantized, export it as F16."
        )
    return name


def _bundle_instead(
    host: str,
    target: Path,
    name: str,
    gguf_file: Path,
    builder: Callable[[str, str | None], Modelfile],
    adapter_file: Path | None,
    quantize: str | None,
) -> DeployResult:
    """No server answers at ``host``: write a bundle to ``target`` and say
    how to create the model from it."""
    folder, mf, command = write_bundle(
        target, name, gguf_file, builder, adapter_file, quantize
    )
    return DeployResult(
        name=name,
        deployed=False,
        host=host,
        server_version=None,
        modelfile=mf.text,
        family=mf.family,
        command=command,
        bundle_dir=str(folder),
        message=(
            f"No Ollama server answers at {host}; wrote a bundle to "
            f"{folder}: "
            f"run `{command}` there."
        ),
        warnings=list(mf.warnings),
    )


def _push_blobs(
    client: OllamaClient, files: list[Path], progress: Progress | None
) -> tuple[dict[Path, str], list[str], list[str]]:
    """Upload each file the server lacks: the digests, and the names
    uploaded and skipped (already there)."""
    uploaded: list[str] = []
    skipped: list[str] = []
    digests: dict[Path, str] = {}
    for f in files:
        digest, sent = client.push_blob(f, progress=progress)
        digests[f] = digest
        (uploaded if sent else skipped).append(f.name)
    return digests, uploaded, skipped


def _create_model(
    client: OllamaClient,
    version: str,
    name: str,
    builder: Callable[[str, str | None], Modelfile],
    gguf_file: Path,
    adapter_file: Path | None,
    digests: dict[Path, str],
    quantize: str | None,
) -> tuple[Modelfile, list[str]]:
    """Create the model from the uploaded blobs, through the files API where
    the server has it, else a Modelfile naming the digests; the Modelfile
    and the server's statuses."""
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
    return mf, statuses


def _check_created(
    client: OllamaClient, name: str, verify_prompt: str | None
) -> str | None:
    """Ask the server for the new model, and a few tokens of ``verify_prompt``
    when given; a failure says the model exists and what went wrong."""
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
    return sample
