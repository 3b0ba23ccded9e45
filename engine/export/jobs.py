"""Job kinds ``export.gguf``, ``deploy.ollama`` and ``export.onnx``.

Validators run in the supervisor (cheap checks: fields, files, architecture);
job functions run in the job process and report progress through the
context. Each summary lists the files it made under ``models`` so the
supervisor registers them with their lineage (``parents``: model ids).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from engine.contract import DEFAULT_OLLAMA_HOST
from engine.errors import ConfigError, EngineError
from engine.export.modelfile import FAMILIES
from engine.export.types import GGUF_TYPES
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.ollama import K_QUANTS
from engine.settings import build, form_of, setting
from engine.store.paths import child, chosen_path, safe_name


@dataclass(frozen=True)
class GGUFExportConfig:
    """Settings of an ``export.gguf`` job."""

    model_dir: str | None = setting(None, label="Model folder", picker="base_model")
    """The model folder (or, with ``adapter``, the LoRA adapter folder)."""
    type: str = setting("f16", choices=GGUF_TYPES, label="GGUF type")
    """Tensor type: f16 / bf16 / f32 keep the weights (Ollama can quantize
    them further); q8_0 is near-lossless at half of f16; q4_0 ... q5_1 are
    smaller and rougher; q2_k ... q6_k are llama.cpp's K-quant mixes (q4_k_m
    and q5_k_m the usual choices). Adapters take f32, f16, bf16 or q8_0."""
    name: str | None = setting(None, label="Model name")
    """Model name written in the file, and the file's name before its type
    (None: the folder's name)."""
    out: str | None = setting(None, label="Output file")
    """The ``.gguf`` file to write (None: in the run folder)."""
    calibration_text: str | None = setting(None, label="Calibration text")
    """A text file, or a project dataset (folder, .jsonl or .parquet), the
    model runs over to weight the K-quants by the importance of each input
    column, as llama.cpp's imatrix does (K-quant types only; empty: none)."""
    logit_error: bool = False
    """Measure the file's logits against the source model's on a few prompts
    (loads both with transformers; models only)."""
    adapter: bool = False
    """Export a LoRA adapter as a GGUF adapter instead of a whole model."""
    base_model_dir: str | None = setting(None, label="Base model folder")
    """The adapter's base model folder (None: the one the adapter names)."""
    parents: list[str] = setting(factory=list, form=False)
    """Model ids the output derives from (its lineage)."""


@dataclass(frozen=True)
class OllamaDeployConfig:
    """Settings of a ``deploy.ollama`` job."""

    gguf: str | None = setting(None, label="GGUF file")
    """The GGUF file to deploy."""
    name: str | None = setting(None, label="Ollama model name")
    """The Ollama model name."""
    host: str = setting(DEFAULT_OLLAMA_HOST, label="Server URL")
    """URL of the Ollama server. Without a server answering there, a bundle
    folder (GGUF, Modelfile, README) is written instead."""
    system: str | None = setting(None, label="System prompt")
    """System prompt baked into the model (None: none)."""
    parameters: dict[str, Any] = setting(factory=dict)
    """Ollama model parameters (``stop``, ``temperature``, ...)."""
    quantize: str | None = setting(None, choices=K_QUANTS)
    """K-quant Ollama makes from an F16/BF16/F32 file (None: as it is)."""
    adapter_gguf: str | None = setting(None, label="Adapter GGUF")
    """A LoRA adapter GGUF applied on top of ``gguf``."""
    family: str | None = setting(None, choices=FAMILIES, label="Chat template")
    """Chat template family (None: read from the GGUF)."""
    bundle_dir: str | None = setting(None, label="Bundle folder")
    """Where to write the Modelfile bundle (None: in the run folder)."""
    verify_prompt: str | None = setting("Hello", label="Check prompt")
    """A prompt sent to the new model to check that it answers (None: no
    check)."""
    parents: list[str] = setting(factory=list, form=False)
    """Model ids the output derives from (its lineage)."""


@dataclass(frozen=True)
class ONNXExportConfig:
    """Settings of an ``export.onnx`` job."""

    policy: str | None = setting(None, label="Policy file")
    """The SB3 policy file (``model.zip``)."""
    out: str | None = setting(None, label="Output file")
    """The ``.onnx`` file to write (None: in the run folder, named after
    ``name``)."""
    name: str | None = setting(None, label="Model name")
    """The exported model's name, and its file's in the run folder (None:
    the policy file's)."""
    samples: int = setting(64, min=1, unit="observations")
    """Random observations the export is verified on."""
    parents: list[str] = setting(factory=list, form=False)
    """Model ids the output derives from (its lineage)."""


E = TypeVar("E", GGUFExportConfig, OllamaDeployConfig, ONNXExportConfig)


def _common(config: Mapping[str, Any], cls: type[E], what: str) -> E:
    cfg = build(cls, config, what)
    if not isinstance(cfg.parents, list) or not all(
        isinstance(p, str) for p in cfg.parents
    ):
        raise ConfigError("parents", "parents must be a list of model ids.")
    return cfg


def out_path(ctx: JobContext, out: str, field: str = "out") -> Path:
    """:func:`engine.store.paths.chosen_path` in the job's project."""
    return chosen_path(ctx.project_dir, out, field)


def existing(value: str | None, key: str, what: str, folder: bool) -> str:
    """The path a required file or folder setting names, which must exist."""
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"{key} is required: the {what}.")
    path = Path(value).expanduser()
    if folder and not path.is_dir():
        raise ConfigError(key, f"The {what} {path} does not exist.")
    if not folder and not path.is_file():
        raise ConfigError(key, f"The {what} {path} does not exist.")
    return str(path)


def check_calibration(value: Any, gguf_type: str, adapter: bool = False) -> str | None:
    """The calibration text setting checked for an export of ``gguf_type``:
    None when empty, else the path it names (which must exist and hold
    something); a ConfigError on ``calibration_text`` otherwise."""
    from engine.export.types import imatrix_problem

    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    problem = imatrix_problem(gguf_type, adapter)
    if problem:
        raise ConfigError("calibration_text", problem)
    path = Path(str(value)).expanduser()
    if not path.exists():
        raise ConfigError(
            "calibration_text", f"The calibration text {path} does not exist."
        )
    if path.is_file() and path.stat().st_size == 0:
        raise ConfigError(
            "calibration_text",
            f"The calibration text {path} is empty; give a file with text.",
        )
    return str(path)


def lower_type(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` with its tensor type in lower case (Q4_K_M as q4_k_m)."""
    kind = config.get("type")
    return {**config, "type": kind.lower()} if isinstance(kind, str) else config


def validate_gguf(config: Mapping[str, Any]) -> GGUFExportConfig:
    from engine.export.gguf import SUPPORTED_ARCHITECTURES
    from engine.export.types import adapter_type_problem

    cfg = _common(lower_type(config), GGUFExportConfig, "a GGUF export")
    what = "adapter folder" if cfg.adapter else "model folder"
    src = Path(existing(cfg.model_dir, "model_dir", what, folder=True))
    problem = adapter_type_problem(cfg.type) if cfg.adapter else None
    if problem:
        raise ConfigError("type", problem)
    calibration = check_calibration(cfg.calibration_text, cfg.type, cfg.adapter)
    base = cfg.base_model_dir
    if cfg.adapter:
        if not (src / "adapter_config.json").is_file():
            raise ConfigError("model_dir", f"{src} has no adapter_config.json.")
        if base is not None:
            base = existing(base, "base_model_dir", "base model folder", folder=True)
    else:
        cfg_path = src / "config.json"
        if not cfg_path.is_file():
            raise ConfigError(
                "model_dir", f"{src} has no config.json, so it is not a model folder."
            )
        try:
            arch = (json.loads(cfg_path.read_text()).get("architectures") or [""])[0]
        except ValueError:
            raise ConfigError("model_dir", f"{cfg_path} is not valid JSON.") from None
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ConfigError(
                "model_dir",
                f"Cannot export {arch or 'this model'} to GGUF; supported "
                "architectures: "
                f"{', '.join(SUPPORTED_ARCHITECTURES)}.",
            )
    if cfg.out is not None and not str(cfg.out).endswith(".gguf"):
        raise ConfigError("out", "out must be a file name ending in .gguf.")
    return replace(
        cfg,
        model_dir=str(src),
        base_model_dir=base,
        calibration_text=calibration,
    )


def calibration_field(field: dict[str, Any], gguf_type: str) -> dict[str, Any]:
    """The calibration text's form field for an export of ``gguf_type``:
    disabled, with the reason, for a type that takes no importance matrix."""
    from engine.export.types import imatrix_problem

    problem = imatrix_problem(gguf_type)
    return {**field, "disabled": problem} if problem else field


def gguf_form(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The export form for what is exported: an adapter offers the adapter
    types and neither calibration nor the logit error (they weigh a whole
    model); calibration text is offered to K-quant types only."""
    from engine.export.types import adapter_type_problem

    adapter = bool(values.get("adapter"))
    gguf_type = str(values.get("type") or GGUFExportConfig.type).lower()
    fields = []
    for field in form_of(GGUFExportConfig):
        if adapter and field["name"] in ("calibration_text", "logit_error"):
            continue
        if adapter and field["name"] == "type":
            choices = [c for c in field["choices"] if adapter_type_problem(c) is None]
            field = {**field, "choices": choices}
        if field["name"] == "calibration_text":
            field = calibration_field(field, gguf_type)
        fields.append(field)
    return fields


def logit_error_without_imatrix(
    model_dir: Path, beside: Path, gguf_type: str
) -> dict[str, float]:
    """The logit error of ``gguf_type`` exported without an importance
    matrix, written to a temporary file beside ``beside`` and removed."""
    import tempfile

    from engine.export.gguf import export_gguf
    from engine.export.logit_check import logit_error

    with tempfile.TemporaryDirectory(dir=beside.parent, prefix=".plain-") as tmp:
        plain = Path(tmp) / beside.name
        export_gguf(model_dir, plain, gguf_type)
        return logit_error(model_dir, plain)


@job_kind(
    "export.gguf",
    check=validate_gguf,
    form=gguf_form,
    label="GGUF export",
    group="export",
    progress_unit="bytes",  # of the source tensors written
)
def run_gguf(ctx: JobContext, cfg: GGUFExportConfig) -> dict[str, Any]:
    """Converts a Hugging Face model or LoRA adapter to GGUF and verifies the file."""
    from engine.export.gguf import export_gguf, export_lora_gguf

    assert cfg.model_dir is not None  # validate_gguf requires it
    src = Path(cfg.model_dir)
    name = cfg.name or src.name
    out = (
        out_path(ctx, cfg.out)
        if cfg.out
        else child(ctx.run_dir, "output", f"{name}-{cfg.type}", "name", ".gguf")
    )

    def progress(done: float, total: float, message: str) -> None:
        ctx.progress(done, total, message)

    ctx.log(f"Exporting {src} to {out} ({cfg.type.upper()})")
    if cfg.adapter:
        report = export_lora_gguf(src, out, cfg.type, cfg.base_model_dir, progress)
    else:
        imatrix = None
        if cfg.calibration_text:
            from engine.export.imatrix import collect_imatrix

            ctx.log(f"Collecting the importance matrix on {cfg.calibration_text}")
            imatrix = collect_imatrix(src, cfg.calibration_text, progress)
        report = export_gguf(
            src, out, cfg.type, progress, name=cfg.name, imatrix=imatrix
        )
        if cfg.logit_error:
            from engine.export.logit_check import logit_error

            ctx.log("Measuring the logit error against the source model")
            report.logit_error = logit_error(src, out)
            if imatrix is not None:
                ctx.log("Measuring the logit error without the importance matrix")
                report.logit_error_without_imatrix = logit_error_without_imatrix(
                    src, out, cfg.type
                )
    ctx.log(report.summary())
    return {
        "report": report.to_dict(),
        "models": [
            {
                "name": out.stem,
                "kind": "gguf",
                "file": str(out.resolve()),
                "base": str(src),
                "parents": cfg.parents,
                "metrics": {
                    "size_mb": round(report.size_bytes / 1e6, 3),
                    "type": report.file_type,
                    "bits_per_weight": round(report.bits_per_weight, 3),
                    "seconds": round(report.seconds, 2),
                    **(
                        {"logit_error": round(report.logit_error["mean_abs"], 5)}
                        if report.logit_error
                        else {}
                    ),
                    **(
                        {"imatrix_tokens": report.imatrix["tokens"]}
                        if report.imatrix
                        else {}
                    ),
                    "verified": report.verified,
                    "gguf_kind": report.kind,
                },
            }
        ],
    }


def checked_ollama_name(name: str | None) -> str:
    """The Ollama model name setting checked; a ConfigError on ``name``."""
    from engine.ollama import check_model_name

    if not isinstance(name, str):
        raise ConfigError("name", "name is required: the Ollama model name.")
    try:
        return check_model_name(name)
    except EngineError as exc:
        raise ConfigError("name", str(exc)) from None


def checked_host(host: str) -> str:
    """The Ollama server URL setting checked; a ConfigError on ``host``."""
    from engine.ollama import check_host

    try:
        return check_host(host)
    except EngineError as exc:
        raise ConfigError("host", str(exc)) from None


def validate_ollama(config: Mapping[str, Any]) -> OllamaDeployConfig:
    cfg = _common(config, OllamaDeployConfig, "an Ollama deployment")
    gguf = existing(cfg.gguf, "gguf", "GGUF file", folder=False)
    name = checked_ollama_name(cfg.name)
    host = checked_host(cfg.host)
    if not isinstance(cfg.parameters, dict):
        raise ConfigError(
            "parameters", "parameters must be a mapping of name to value."
        )
    adapter = cfg.adapter_gguf
    if adapter is not None:
        adapter = existing(adapter, "adapter_gguf", "adapter GGUF file", folder=False)
    return replace(cfg, gguf=gguf, name=name, host=host, adapter_gguf=adapter)


@job_kind(
    "deploy.ollama",
    check=validate_ollama,
    label="Ollama deploy",
    group="export",
    progress_unit="bytes",
)
def run_ollama(ctx: JobContext, cfg: OllamaDeployConfig) -> dict[str, Any]:
    """Creates an Ollama model from a GGUF, or writes an import bundle."""
    from engine.export.ollama import deploy_gguf, deployed_model_entry

    assert cfg.gguf is not None and cfg.name is not None  # validate_ollama
    result = deploy_gguf(
        Path(cfg.gguf),
        cfg.name,
        host=cfg.host,
        system=cfg.system,
        parameters=cfg.parameters,
        quantize=cfg.quantize,
        adapter_path=cfg.adapter_gguf,
        family=cfg.family,
        # Without a server the bundle goes to the run folder unless named.
        bundle_dir=(
            out_path(ctx, cfg.bundle_dir, "bundle_dir")
            if cfg.bundle_dir
            else ctx.run_dir / "output" / "ollama-bundle"
        ),
        always_bundle=cfg.bundle_dir is not None,
        verify_prompt=cfg.verify_prompt,
        progress=lambda d, t, m: ctx.progress(d, t, m),
    )
    ctx.log(result.message)
    for w in result.warnings:
        ctx.log(f"Warning: {w}")
    models = []
    if result.deployed:
        models.append(deployed_model_entry(result, ctx.run_dir / "output", cfg.parents))
    elif result.bundle_dir:
        models.append(
            {
                "name": cfg.name,
                "kind": "ollama-bundle",
                "file": result.bundle_dir,
                "parents": cfg.parents,
                "metrics": {"family": result.family or "unknown"},
            }
        )
    return {"deploy": result.to_dict(), "models": models}


def validate_onnx(config: Mapping[str, Any]) -> ONNXExportConfig:
    cfg = _common(config, ONNXExportConfig, "an ONNX export")
    policy = existing(cfg.policy, "policy", "policy file", folder=False)
    if cfg.out is not None and not str(cfg.out).endswith(".onnx"):
        raise ConfigError("out", "out must be a file name ending in .onnx.")
    return replace(cfg, policy=policy)


@job_kind(
    "export.onnx",
    check=validate_onnx,
    label="ONNX export",
    group="export",
    progress_unit="stages",
)
def run_onnx(ctx: JobContext, cfg: ONNXExportConfig) -> dict[str, Any]:
    """Exports a stable-baselines3 policy to ONNX, checked with onnxruntime."""
    from engine.export.onnx_export import export_onnx

    assert cfg.policy is not None  # validate_onnx requires it
    src = Path(cfg.policy)
    stem = safe_name(cfg.name) if cfg.name else src.stem
    out = (
        out_path(ctx, cfg.out)
        if cfg.out
        else child(ctx.run_dir, "output", stem, "name", ".onnx")
    )
    ctx.progress(0, 2, "exporting")
    report = export_onnx(src, out, samples=cfg.samples, project_dir=ctx.project_dir)
    ctx.progress(2, 2, "verified")
    ctx.log(report.summary())
    return {
        "report": report.to_dict(),
        "models": [
            {
                "name": cfg.name or out.stem,
                "kind": "onnx",
                "file": str(out.resolve()),
                "parents": cfg.parents,
                "metrics": {
                    "max_abs_diff": report.max_abs_diff,
                    "verified": report.verified,
                },
            }
        ],
    }
