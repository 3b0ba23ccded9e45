"""One-click Export to Ollama as one engine job (``export.ollama``) and one
command (``rl-studio-engine export-ollama``): merge a LoRA adapter into its
base, export the model to GGUF, then create the Ollama model (or write an
import bundle when no server answers).

The stages and their order live here only; the studio starts the job and
shows its progress. What the job starts from decides the stages: a LoRA
adapter folder gets all three, a model folder the last two, a ``.gguf`` file
only the deployment. Each file made is listed in the summary's ``models`` so
the supervisor registers it with its lineage (merged model → GGUF → the
Ollama model, or the import bundle when no server answered).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.export.jobs import GGUFExportConfig, OllamaDeployConfig
from engine.export.types import OLLAMA_EXPORT_TYPES, OLLAMA_SERVER_QUANTS
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.progress import Progress
from engine.settings import build, form_of, same_setting, setting

SERVER_QUANTS = OLLAMA_SERVER_QUANTS
EXPORT_TYPES = OLLAMA_EXPORT_TYPES


@dataclass(frozen=True)
class OllamaExportConfig:
    """Settings of an ``export.ollama`` job (merge → GGUF → deploy)."""

    model: str | None = setting(None, label="Model", picker="base_model")
    """A LoRA adapter folder, a Hugging Face model folder or a ``.gguf`` file."""
    name: str | None = setting(None, label="Ollama model name")
    """The Ollama model name, e.g. ``jira-agent:q4``."""
    type: str = setting(EXPORT_TYPES[0], choices=EXPORT_TYPES)
    """Tensor type, any case: the exporter writes all but ollama-q4_k_m and
    ollama-q4_k_s, which the Ollama server makes from an F16 export."""
    host: str = same_setting(OllamaDeployConfig, "host")
    system: str | None = same_setting(OllamaDeployConfig, "system")
    base: str | None = setting(None, label="Base model", picker="base_model")
    """An adapter's base model (None: the one the adapter names)."""
    dtype: str = setting("float32", choices=("float32", "float16", "bfloat16"))
    """Precision of the merged model written before the GGUF export."""
    calibration_text: str | None = same_setting(GGUFExportConfig, "calibration_text")
    parents: list[str] = setting(factory=list, form=False)
    """Model ids the outputs derive from (their lineage)."""
    stages: list[str] = setting(factory=list, form=False)
    """The stages the source needs, in order (``merge``, ``gguf``,
    ``deploy``): filled in by validation from what ``model`` is."""


@dataclass
class Stage:
    kind: str
    """``merge``, ``gguf`` or ``deploy``."""
    title: str


STAGE_TITLES = {
    "merge": "Merge adapter into base",
    "gguf": "Export GGUF",
    "deploy": "Modelfile and deploy",
}


def source_kind(path: Path) -> str:
    """``lora-adapter``, ``hf-model`` or ``gguf``; a ConfigError otherwise."""
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    if path.is_dir() and (path / "adapter_config.json").is_file():
        return "lora-adapter"
    if path.is_dir() and (path / "config.json").is_file():
        return "hf-model"
    raise ConfigError(
        "model",
        f"{path} is neither a LoRA adapter folder, a model folder nor a .gguf file.",
    )


def stages_for(kind: str) -> list[Stage]:
    kinds = {
        "lora-adapter": ["merge", "gguf", "deploy"],
        "hf-model": ["gguf", "deploy"],
    }
    return [Stage(k, STAGE_TITLES[k]) for k in kinds.get(kind, ["deploy"])]


def validate(config: Mapping[str, Any]) -> OllamaExportConfig:
    from engine.export.jobs import (
        check_calibration,
        checked_host,
        checked_ollama_name,
        lower_type,
        validate_gguf,
    )

    cfg = build(OllamaExportConfig, lower_type(config), "an Ollama export")
    if not isinstance(cfg.model, str) or not cfg.model:
        raise ConfigError("model", "model is required: the adapter, model or GGUF.")
    src = Path(cfg.model).expanduser()
    if not src.exists():
        raise ConfigError("model", f"The model {src} does not exist.")
    kind = source_kind(src)
    name = checked_ollama_name(cfg.name)
    host = checked_host(cfg.host)
    gguf_type = cfg.type
    if kind == "gguf" and f"ollama-{gguf_type}" in SERVER_QUANTS:
        # A GGUF file is deployed as it is: only the server can make it Q4_K_M.
        gguf_type = f"ollama-{gguf_type}"
    export_type = "f16" if gguf_type in SERVER_QUANTS else gguf_type
    calibration = cfg.calibration_text
    if kind == "gguf" and isinstance(calibration, str) and calibration.strip():
        raise ConfigError(
            "calibration_text",
            "A .gguf file is deployed as it is; calibration text weights an "
            "export from a model or adapter.",
        )
    base = cfg.base
    if kind == "lora-adapter":
        from engine.llm.base import inspect_model

        info = inspect_model(src, "model")
        named = base or info.base
        if not named:
            raise ConfigError(
                "base", "The adapter does not name its base model; set base."
            )
        base = str(inspect_model(named, "base").path)
        if Path(base).is_dir():  # the merged model will have its type
            validate_gguf({"model_dir": base, "type": export_type})
    elif kind == "hf-model":
        validate_gguf({"model_dir": str(src), "type": export_type})
    return replace(
        cfg,
        model=str(src),
        name=name,
        host=host,
        type=gguf_type,
        base=base,
        calibration_text=check_calibration(calibration, gguf_type),
        stages=[s.kind for s in stages_for(kind)],
    )


def export_form(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The one-click form for what it starts from: a ``.gguf`` file is
    deployed as it is (no calibration text); calibration text is offered to
    K-quant types only."""
    from engine.export.jobs import calibration_field

    gguf_source = str(values.get("model") or "").endswith(".gguf")
    gguf_type = str(values.get("type") or OllamaExportConfig.type).lower()
    fields = []
    for entry in form_of(OllamaExportConfig):
        if entry["name"] == "calibration_text":
            if gguf_source:
                continue
            entry = calibration_field(entry, gguf_type)
        fields.append(entry)
    return fields


@dataclass
class ExportResult:
    """What ``export_to_ollama`` made."""

    deploy: dict[str, Any]
    """``DeployResult.to_dict()``."""
    models: list[dict[str, Any]] = field(default_factory=list)
    """Model entries for the project (merged folder, GGUF, bundle)."""
    stopped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Stopped(BaseException):
    """Raised from a stage's progress callback when a stop was asked; a
    BaseException so that no stage turns it into its own error (each stage
    removes its partial output on the way out)."""


@dataclass
class _Export:
    """An export under way: where it writes, what it made so far, and the
    file the next stage starts from."""

    cfg: OllamaExportConfig
    work_dir: Path
    say: Callable[[str], None]
    current: Path
    models: list[dict[str, Any]] = field(default_factory=list)
    deploy: dict[str, Any] = field(default_factory=dict)

    @property
    def safe(self) -> str:
        """The model name as a file name stem."""
        from engine.export.ollama import file_stem

        assert self.cfg.name is not None  # validate requires it
        return file_stem(self.cfg.name)

    @property
    def sources(self) -> list[str]:
        """The parents of a stage's output: the file the previous stage
        made, else the ids the export was given."""
        return [str(self.current)] if self.models else list(self.cfg.parents)

    def merge(self, report: Progress) -> None:
        from engine.llm.merge import merge_adapter

        cfg = self.cfg
        out_dir = self.work_dir / f"{self.safe}-merged"
        assert cfg.base is not None  # validate names an adapter's base
        merge_adapter(str(self.current), cfg.base, out_dir, cfg.dtype)
        self.models.append(
            {
                "name": f"{self.safe}-merged",
                "kind": "hf-merged",
                "file": str(out_dir),
                "base": cfg.base,
                "parents": [*cfg.parents, cfg.base],
                "metrics": {"dtype": cfg.dtype},
            }
        )
        self.current = out_dir

    def gguf(self, report: Progress) -> None:
        from engine.export.gguf import export_gguf

        cfg = self.cfg
        export_type = "f16" if cfg.type in SERVER_QUANTS else cfg.type
        gguf_file = self.work_dir / f"{self.safe}-{export_type}.gguf"
        imatrix = None
        export_progress: Progress = report
        if cfg.calibration_text:
            from engine.export.imatrix import collect_imatrix

            # The stage's first half collects, its second exports.
            self.say(f"Collecting the importance matrix on {cfg.calibration_text}")
            imatrix = collect_imatrix(
                self.current,
                cfg.calibration_text,
                lambda d, t, m: report(d, 2 * t, m),
            )

            def export_progress(d: float, t: float, m: str) -> None:
                report(t + d, 2 * t, m)

        rep = export_gguf(
            self.current,
            gguf_file,
            export_type,
            export_progress,
            name=self.safe,
            imatrix=imatrix,
        )
        self.say(rep.summary())
        tokens = {"imatrix_tokens": rep.imatrix["tokens"]} if rep.imatrix else {}
        self.models.append(
            {
                "name": gguf_file.stem,
                "kind": "gguf",
                "file": str(gguf_file.resolve()),
                "base": str(self.current),
                "parents": self.sources,
                "metrics": {
                    "size_mb": round(rep.size_bytes / 1e6, 3),
                    "type": rep.file_type,
                    "verified": rep.verified,
                    "gguf_kind": rep.kind,
                    **tokens,
                },
            }
        )
        self.current = gguf_file

    def deploy_stage(self, report: Progress) -> None:
        from engine.export.ollama import deploy_gguf, deployed_model_entry

        cfg = self.cfg
        assert cfg.name is not None  # validate requires it
        result = deploy_gguf(
            self.current,
            cfg.name,
            host=cfg.host,
            system=cfg.system,
            quantize=SERVER_QUANTS.get(cfg.type),
            bundle_dir=self.work_dir / f"{self.safe}-ollama",
            progress=report,
        )
        self.say(result.message)
        for w in result.warnings:
            self.say(f"Warning: {w}")
        self.deploy = result.to_dict()
        if result.deployed:
            self.models.append(
                deployed_model_entry(result, self.work_dir, self.sources)
            )
        elif result.bundle_dir:
            self.models.append(
                {
                    "name": cfg.name,
                    "kind": "ollama-bundle",
                    "file": result.bundle_dir,
                    "parents": self.sources,
                    "metrics": {"family": result.family or "unknown"},
                }
            )


def export_to_ollama(
    cfg: OllamaExportConfig,
    work_dir: Path,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> ExportResult:
    """Run the stages of a validated config, writing into ``work_dir``.

    Progress is one bar over all stages (each stage one unit of the total);
    a stop request ends the export at the stage's next progress report (the
    merge reports none) or between stages, keeping what finished stages made.
    """
    assert cfg.model is not None and cfg.name is not None  # validate
    stages = [Stage(k, STAGE_TITLES[k]) for k in cfg.stages]
    total = float(len(stages))
    say = log or (lambda text: None)
    export = _Export(cfg, work_dir, say, current=Path(cfg.model))
    run_stage = {
        "merge": export.merge,
        "gguf": export.gguf,
        "deploy": export.deploy_stage,
    }
    for index, stage in enumerate(stages):

        def report(done: float, of: float, message: str, i: int = index) -> None:
            if should_stop():
                raise _Stopped
            if progress is not None:
                frac = min(max(done / of, 0.0), 1.0) if of > 0 else 0.0
                progress(i + frac, total, f"{stages[i].title}: {message}")

        try:
            report(0, 1, "starting")
            say(f"{stage.title} ({index + 1}/{len(stages)})")
            run_stage[stage.kind](report)
        except _Stopped:
            say(f"Stopped during {stage.title.lower()}.")
            return ExportResult(export.deploy, export.models, stopped=True)
        if progress is not None:
            progress(index + 1, total, f"{stage.title}: done")
    return ExportResult(export.deploy, export.models)


@job_kind(
    "export.ollama",
    check=validate,
    form=export_form,
    label="Export to Ollama",
    group="export",
    progress_unit="stages",
)
def run(ctx: JobContext, cfg: OllamaExportConfig) -> dict[str, Any]:
    """One-click export to Ollama: merges a LoRA adapter, exports a GGUF and creates
    the Ollama model (or writes an import bundle).

    Each stage writes into the run folder's ``output``."""
    out = ctx.run_dir / "output"
    out.mkdir(parents=True, exist_ok=True)
    result = export_to_ollama(
        cfg,
        out,
        progress=lambda d, t, m: ctx.progress(d, t, m),
        log=ctx.log,
        should_stop=lambda: bool(ctx.should_stop),
    )
    return result.to_dict()
