"""Job kinds ``export.gguf``, ``deploy.ollama`` and ``export.onnx``.

Validators run in the supervisor (cheap checks: fields, files, architecture);
job functions run in the job process and report progress through the
context. Each summary lists the files it made under ``models`` so the
supervisor registers them with their lineage (``parents``: model ids).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.contract import DEFAULT_OLLAMA_HOST
from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.settings import checked_config, setting
from engine.store.paths import child, inside


@dataclass
class GGUFExportConfig:
    """Settings of an ``export.gguf`` job."""

    model_dir: str | None = None
    """The model folder (or, with ``adapter``, the LoRA adapter folder)."""
    out: str | None = None
    """The ``.gguf`` file to write (None: in the run folder)."""
    type: str = "f16"
    """Tensor type: f32, f16, bf16, q8_0, ..., q4_k_m, ... (adapters: f32,
    f16, bf16, q8_0)."""
    adapter: bool = False
    """Export a LoRA adapter as a GGUF adapter instead of a whole model."""
    base_model_dir: str | None = None
    """The adapter's base model folder (None: the one the adapter names)."""
    name: str | None = None
    """Model name written in the file (None: the folder's name)."""
    logit_error: bool = False
    """Measure the file's logits against the source model's on a few prompts
    (loads both with transformers; models only)."""
    calibration_text: str | None = setting(None, label="Calibration text")
    """A text file, or a project dataset (folder, .jsonl or .parquet), the
    model runs over to weight the K-quants by the importance of each input
    column, as llama.cpp's imatrix does (K-quant types only; empty: none)."""
    parents: list[str] = setting(factory=list)
    """Model ids the output derives from (its lineage)."""


@dataclass
class OllamaDeployConfig:
    """Settings of a ``deploy.ollama`` job."""

    gguf: str | None = None
    """The GGUF file to deploy."""
    name: str | None = None
    """The Ollama model name."""
    host: str = DEFAULT_OLLAMA_HOST
    """The Ollama server's URL."""
    system: str | None = None
    """System prompt baked into the model."""
    parameters: dict[str, Any] = setting(factory=dict)
    """Ollama model parameters (``stop``, ``temperature``, ...)."""
    quantize: str | None = None
    """K-quant Ollama makes from an F16/BF16/F32 file (None: as it is)."""
    adapter_gguf: str | None = None
    """A LoRA adapter GGUF applied on top of ``gguf``."""
    family: str | None = None
    """Chat template family (None: read from the GGUF)."""
    bundle_dir: str | None = None
    """Where to write the Modelfile bundle (None: in the run folder)."""
    verify_prompt: str | None = "Hello"
    """A prompt the deployed model must answer (None: no check)."""
    parents: list[str] = setting(factory=list)
    """Model ids the output derives from (its lineage)."""


@dataclass
class ONNXExportConfig:
    """Settings of an ``export.onnx`` job."""

    policy: str | None = None
    """The SB3 policy file (``model.zip``)."""
    out: str | None = None
    """The ``.onnx`` file to write (None: in the run folder)."""
    samples: int = setting(64, min=1, unit="observations")
    """Random observations the export is verified on."""
    parents: list[str] = setting(factory=list)
    """Model ids the output derives from (its lineage)."""


def _common(config: dict[str, Any], cls: type, what: str) -> dict[str, Any]:
    out = checked_config(cls, config, what)
    if not isinstance(out["parents"], list) or not all(
        isinstance(p, str) for p in out["parents"]
    ):
        raise ConfigError("parents", "parents must be a list of model ids.")
    return out


def out_path(ctx: JobContext, out: str, field: str = "out") -> Path:
    """The file or folder ``out`` names: an absolute path as it is (the user
    chose it in a file dialog); a relative one is taken from the project
    folder and must stay inside it (else a ConfigError naming ``field``)."""
    path = Path(out).expanduser()
    return path if path.is_absolute() else inside(ctx.project_dir, path, field)


def _existing(out: dict[str, Any], key: str, what: str, folder: bool) -> Path:
    value = out.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"{key} is required: the {what}.")
    path = Path(value).expanduser()
    if folder and not path.is_dir():
        raise ConfigError(key, f"The {what} {path} does not exist.")
    if not folder and not path.is_file():
        raise ConfigError(key, f"The {what} {path} does not exist.")
    return path


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


def validate_gguf(config: dict[str, Any]) -> dict[str, Any]:
    from engine.export.gguf import SUPPORTED_ARCHITECTURES
    from engine.export.types import GGUF_TYPES, adapter_type_problem

    out = _common(config, GGUFExportConfig, "a GGUF export")
    adapter = out["adapter"]
    src = _existing(
        out, "model_dir", "adapter folder" if adapter else "model folder", folder=True
    )
    out["model_dir"] = str(src)
    if not isinstance(out["type"], str) or out["type"].lower() not in GGUF_TYPES:
        raise ConfigError(
            "type", f"type must be one of {', '.join(GGUF_TYPES)} (any case)."
        )
    problem = adapter_type_problem(out["type"]) if adapter else None
    if problem:
        raise ConfigError("type", problem)
    out["type"] = out["type"].lower()
    out["calibration_text"] = check_calibration(
        out["calibration_text"], out["type"], adapter
    )
    if adapter:
        if not (src / "adapter_config.json").is_file():
            raise ConfigError("model_dir", f"{src} has no adapter_config.json.")
        if out["base_model_dir"] is not None:
            out["base_model_dir"] = str(
                _existing(out, "base_model_dir", "base model folder", folder=True)
            )
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
    if out["out"] is not None and not str(out["out"]).endswith(".gguf"):
        raise ConfigError("out", "out must be a file name ending in .gguf.")
    return out


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


def run_gguf(ctx: JobContext) -> dict[str, Any]:
    from engine.export.gguf import export_gguf, export_lora_gguf

    cfg = ctx.config
    src = Path(cfg["model_dir"])
    name = cfg["name"] or src.name
    out = (
        out_path(ctx, cfg["out"])
        if cfg["out"]
        else child(ctx.run_dir, "output", f"{name}-{cfg['type']}", "name", ".gguf")
    )

    def progress(done: float, total: float, message: str) -> None:
        ctx.progress(done, total, message)

    ctx.log(f"Exporting {src} to {out} ({cfg['type'].upper()})")
    if cfg["adapter"]:
        report = export_lora_gguf(
            src, out, cfg["type"], cfg["base_model_dir"], progress
        )
    else:
        imatrix = None
        if cfg["calibration_text"]:
            from engine.export.imatrix import collect_imatrix

            ctx.log(f"Collecting the importance matrix on {cfg['calibration_text']}")
            imatrix = collect_imatrix(src, cfg["calibration_text"], progress)
        report = export_gguf(
            src, out, cfg["type"], progress, name=cfg["name"], imatrix=imatrix
        )
        if cfg["logit_error"]:
            from engine.export.logit_check import logit_error

            ctx.log("Measuring the logit error against the source model")
            report.logit_error = logit_error(src, out)
            if imatrix is not None:
                ctx.log("Measuring the logit error without the importance matrix")
                report.logit_error_without_imatrix = logit_error_without_imatrix(
                    src, out, cfg["type"]
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
                "parents": cfg["parents"],
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


def validate_ollama(config: dict[str, Any]) -> dict[str, Any]:
    from engine.export.modelfile import FAMILIES
    from engine.ollama import K_QUANTS, check_host, check_model_name

    out = _common(config, OllamaDeployConfig, "an Ollama deployment")
    out["gguf"] = str(_existing(out, "gguf", "GGUF file", folder=False))
    if not isinstance(out["name"], str):
        raise ConfigError("name", "name is required: the Ollama model name.")
    try:
        out["name"] = check_model_name(out["name"])
    except EngineError as exc:
        raise ConfigError("name", str(exc)) from None
    try:
        out["host"] = check_host(out["host"])
    except EngineError as exc:
        raise ConfigError("host", str(exc)) from None
    if out["quantize"] is not None and out["quantize"] not in K_QUANTS:
        raise ConfigError("quantize", f"quantize must be one of {', '.join(K_QUANTS)}.")
    if out["family"] is not None and out["family"] not in FAMILIES:
        raise ConfigError("family", f"family must be one of {', '.join(FAMILIES)}.")
    if not isinstance(out["parameters"], dict):
        raise ConfigError(
            "parameters", "parameters must be a mapping of name to value."
        )
    if out["adapter_gguf"] is not None:
        out["adapter_gguf"] = str(
            _existing(out, "adapter_gguf", "adapter GGUF file", folder=False)
        )
    return out


def run_ollama(ctx: JobContext) -> dict[str, Any]:
    from engine.export.ollama import deploy_gguf, deployed_model_entry

    cfg = ctx.config
    gguf_path = Path(cfg["gguf"])
    bundle_dir = cfg["bundle_dir"]
    result = deploy_gguf(
        gguf_path,
        cfg["name"],
        host=cfg["host"],
        system=cfg["system"],
        parameters=cfg["parameters"],
        quantize=cfg["quantize"],
        adapter_path=cfg["adapter_gguf"],
        family=cfg["family"],
        # Without a server the bundle goes to the run folder unless named.
        bundle_dir=(
            out_path(ctx, bundle_dir, "bundle_dir")
            if bundle_dir
            else ctx.run_dir / "output" / "ollama-bundle"
        ),
        always_bundle=bundle_dir is not None,
        verify_prompt=cfg["verify_prompt"],
        progress=lambda d, t, m: ctx.progress(d, t, m),
    )
    ctx.log(result.message)
    for w in result.warnings:
        ctx.log(f"Warning: {w}")
    models = []
    if result.deployed:
        models.append(
            deployed_model_entry(result, ctx.run_dir / "output", cfg["parents"])
        )
    elif result.bundle_dir:
        models.append(
            {
                "name": cfg["name"],
                "kind": "ollama-bundle",
                "file": result.bundle_dir,
                "parents": cfg["parents"],
                "metrics": {"family": result.family or "unknown"},
            }
        )
    return {"deploy": result.to_dict(), "models": models}


def validate_onnx(config: dict[str, Any]) -> dict[str, Any]:
    out = _common(config, ONNXExportConfig, "an ONNX export")
    out["policy"] = str(_existing(out, "policy", "policy file", folder=False))
    if out["out"] is not None and not str(out["out"]).endswith(".onnx"):
        raise ConfigError("out", "out must be a file name ending in .onnx.")
    return out


def run_onnx(ctx: JobContext) -> dict[str, Any]:
    from engine.export.onnx_export import export_onnx

    cfg = ctx.config
    src = Path(cfg["policy"])
    out = (
        out_path(ctx, cfg["out"])
        if cfg["out"]
        else child(ctx.run_dir, "output", src.stem, "policy", ".onnx")
    )
    ctx.progress(0, 2, "exporting")
    report = export_onnx(src, out, samples=cfg["samples"], project_dir=ctx.project_dir)
    ctx.progress(2, 2, "verified")
    ctx.log(report.summary())
    return {
        "report": report.to_dict(),
        "models": [
            {
                "name": out.stem,
                "kind": "onnx",
                "file": str(out.resolve()),
                "parents": cfg["parents"],
                "metrics": {
                    "max_abs_diff": report.max_abs_diff,
                    "verified": report.verified,
                },
            }
        ],
    }
