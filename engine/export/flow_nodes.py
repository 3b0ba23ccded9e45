"""Export nodes: a language model or LoRA adapter to GGUF, a GGUF to
Ollama, and an SB3 policy to ONNX.

Each calls the validator and job function of its job kind
(``export.gguf``, ``deploy.ollama``, ``export.onnx``: ``engine.export.jobs``)
in the flow's process, so a node does exactly what the Models workspace's
Export and Deploy do.

The ``gguf`` value that travels along links::

    {"file": ".../runs/<flow-run>/nodes/<node>/output/<name>-q8_0.gguf",
     "type": "q8_0", "kind": "model" | "adapter", "name": "...",
     "source": "<the model or adapter folder>", "chat_family": "chatml",
     "architecture": "qwen2", "size_bytes": 123, "verified": true}

Deploy's ``report`` is ``engine.export.ollama.DeployResult`` as a dict:
``deployed`` is false when no server answered, and ``bundle_dir`` then holds
the GGUF, a Modelfile and a README with the one ``ollama create`` command.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.export.jobs import GGUFExportConfig, OllamaDeployConfig, ONNXExportConfig
from engine.export.modelfile import FAMILIES
from engine.export.types import adapter_type_problem, imatrix_problem
from engine.flow import ParamSpec, PortSpec
from engine.nodes.base import NodeError, NodeResult, NodeRun
from engine.nodes.registry import node_type
from engine.ollama import DEFAULT_HOST, check_model_name
from engine.settings import fields_of, param_spec, param_specs
from engine.store.paths import safe_name

CATEGORY = "Export"
DEPLOY = fields_of(OllamaDeployConfig)


def _run_job(node: NodeRun, kind: str, config: dict[str, Any]) -> dict[str, Any]:
    from engine.llm.flow_nodes import run_job

    return run_job(node, kind, config)


def _verified_export(
    node: NodeRun,
    kind: str,
    config: dict[str, Any],
    failure: Callable[[dict[str, Any], dict[str, Any]], str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the export job ``kind``: its report and the one model it wrote;
    an EngineError saying ``failure(report, model)`` when reading the file
    back did not verify it."""
    summary = _run_job(node, kind, config)
    report = summary["report"]
    (entry,) = summary["models"]
    if not report.get("verified"):
        raise EngineError(failure(report, entry))
    return report, entry


# --------------------------------------------------------------------- GGUF
@node_type(
    "export.gguf",
    title="Export GGUF",
    category=CATEGORY,
    inputs=(
        PortSpec(
            "model",
            "hf_model",
            required=False,
            help="A full model folder (e.g. merged) to convert; link this or an "
            "adapter.",
        ),
        PortSpec(
            "adapter",
            "adapter",
            required=False,
            help="A LoRA adapter to convert to a GGUF adapter (for llama.cpp's "
            "--lora and Ollama's ADAPTER).",
        ),
        PortSpec(
            "calibration",
            "dataset",
            required=False,
            help="A dataset whose text calibrates the importance matrix of a "
            "K-quant export (instead of the Calibration text file).",
        ),
    ),
    outputs=(PortSpec("gguf", "gguf", help="The GGUF file, read back and checked."),),
    params=(*param_specs(GGUFExportConfig, ("type", "name", "calibration_text")),),
)
def export_gguf(node: NodeRun) -> NodeResult:
    """Convert a language model or LoRA adapter to one GGUF file for
    llama.cpp and Ollama, in pure Python, and verify it by reading it back."""
    p = node.params
    source, is_adapter = node.model_or_adapter("export")
    problem = adapter_type_problem(p["type"]) if is_adapter else None
    calibration = (p.get("calibration_text") or "").strip() or None
    linked = node.inputs.get("calibration")
    if linked is not None:
        if calibration is not None:
            raise NodeError(
                "Link a calibration dataset or name a calibration text file, not both."
            )
        calibration = str(linked["path"])
    if calibration is not None and problem is None:
        problem = imatrix_problem(p["type"], is_adapter)
    if problem:
        raise NodeError(problem)
    default = source.get("name") or Path(source["path"]).name
    if is_adapter:
        default += "-lora"  # beside the merged model's GGUF, tell them apart
    name = safe_name((p.get("name") or "").strip() or default)
    report, entry = _verified_export(
        node,
        "export.gguf",
        {
            "model_dir": source["path"],
            "type": p["type"],
            "adapter": is_adapter,
            "base_model_dir": source.get("base") if is_adapter else None,
            "name": name,
            "calibration_text": calibration,
            "parents": [source["path"]],
        },
        lambda report, entry: (
            f"The GGUF {Path(entry['file']).name} did not pass its checks: "
            f"{'; '.join(report.get('checks', [])) or 'unknown reason'}."
        ),
    )
    value = {
        "file": entry["file"],
        "type": p["type"],
        "kind": report.get("kind", "adapter" if is_adapter else "model"),
        "name": name,
        "source": source["path"],
        "chat_family": source.get("chat_family", "unknown"),
        "architecture": report.get("architecture", ""),
        "size_bytes": int(report.get("size_bytes", 0)),
        "verified": True,
    }
    return NodeResult(
        outputs={"gguf": value},
        summary={
            "file": Path(entry["file"]).name,
            "size_mb": round(value["size_bytes"] / 1e6, 3),
            "tensors": report.get("tensor_count"),
            **(
                {"imatrix_tokens": report["imatrix"]["tokens"]}
                if report.get("imatrix")
                else {}
            ),
        },
        models=[
            {
                **entry,
                "name": f"{name} ({p['type'].upper()})",
                "env": source.get("env_id", ""),
                "algo": "GGUF",
            }
        ],
        files=[entry["file"]],
    )


# --------------------------------------------------------------------- ONNX
@node_type(
    "export.onnx",
    title="Export ONNX",
    category=CATEGORY,
    inputs=(PortSpec("policy", "policy", help="A trained SB3 policy (model.zip)."),),
    outputs=(
        PortSpec(
            "report",
            "report",
            help="The ONNX file and its check against the policy on random "
            "observations (onnxruntime): the largest difference, verified.",
        ),
    ),
    params=param_specs(ONNXExportConfig, ("samples",)),
)
def export_onnx(node: NodeRun) -> NodeResult:
    """Export the policy's network, with its observation normalization and
    action masks, to one ONNX file that runs without Python, and check it
    against the policy."""
    policy = node.input("policy")
    source = Path(policy["file"])
    name = str(policy.get("name") or source.parent.name)
    report, entry = _verified_export(
        node,
        "export.onnx",
        {
            "policy": str(source),
            "name": name,  # the file too, not SB3's "model.zip"
            "samples": node.params["samples"],
            "parents": [str(source)],
        },
        lambda report, _entry: (
            f"The ONNX export of {name} does not match the policy: "
            f"{report.get('max_abs_diff')} apart at most."
        ),
    )
    env = policy.get("env") or {}
    return NodeResult(
        outputs={"report": {**report, "file": entry["file"]}},
        summary={
            "file": Path(entry["file"]).name,
            "max_abs_diff": report.get("max_abs_diff"),
        },
        models=[
            {
                **entry,
                "name": f"{name} (ONNX)",
                "env": env.get("id", ""),
                "algo": policy.get("algo", ""),
            }
        ],
        files=[entry["file"]],
    )


# ------------------------------------------------------------------- Ollama
def _check_deploy(params: dict[str, Any]) -> list[str]:
    problems = []
    try:
        check_model_name(str(params.get("name", "")))
    except EngineError as exc:
        problems.append(str(exc))
    host = str(params.get("host", "")).strip()
    url = urllib.parse.urlsplit(host if "://" in host else f"http://{host}")
    if (
        url.scheme not in ("http", "https")
        or not url.hostname
        or url.path
        not in (
            "",
            "/",
        )
    ):
        problems.append(f"host must be a URL like {DEFAULT_HOST}, not {host!r}.")
    return problems


@node_type(
    "export.ollama",
    title="Deploy to Ollama",
    category=CATEGORY,
    inputs=(
        PortSpec("gguf", "gguf", help="The model GGUF to serve."),
        PortSpec(
            "adapter",
            "gguf",
            required=False,
            help="A LoRA adapter GGUF applied on top of the model.",
        ),
    ),
    outputs=(
        PortSpec(
            "report",
            "report",
            help="Whether the model was created (or where its bundle is), the "
            "Modelfile, and a sample answer.",
        ),
    ),
    params=(
        # A new node deploys without typing a name; the job itself needs one.
        param_spec(DEPLOY["name"], default="rlstudio-agent", optional=False),
        *param_specs(OllamaDeployConfig, ("host", "system")),
        # Flows say "none" for no quantization (a choice cannot be left unset).
        ParamSpec(
            "quantize",
            "choice",
            "none",
            choices=("none", *DEPLOY["quantize"].choices),
            help=DEPLOY["quantize"].help,
        ),
        *param_specs(OllamaDeployConfig, ("verify_prompt",)),
    ),
    cacheable=False,  # the server's state is outside the graph: check every run
    check=_check_deploy,
)
def deploy_ollama(node: NodeRun) -> NodeResult:
    """Create the model on an Ollama server with the right chat template and
    stop tokens, or leave a ready-to-import bundle when no server answers."""
    p = node.params
    model = node.input("gguf")
    adapter = node.inputs.get("adapter")
    if model.get("kind") == "adapter":
        raise NodeError(
            "The gguf input is a LoRA adapter; link the base model's GGUF to gguf "
            "and the adapter's to adapter."
        )
    if adapter is not None and adapter.get("kind") != "adapter":
        raise NodeError("The adapter input must be a LoRA adapter GGUF.")
    family = model.get("chat_family")
    summary = _run_job(
        node,
        "deploy.ollama",
        {
            "gguf": model["file"],
            "name": p["name"],
            "host": p["host"].strip(),
            "system": (p.get("system") or "").strip() or None,
            "quantize": None if p["quantize"] == "none" else p["quantize"],
            "adapter_gguf": adapter["file"] if adapter else None,
            "family": family if family in FAMILIES else None,
            "verify_prompt": (p.get("verify_prompt") or "").strip() or None,
            "parents": [model["file"]],
        },
    )
    result = summary["deploy"]
    # A bundle is not registered as a model: its GGUF already is (Export
    # GGUF), and every run without a server would copy it again.
    return NodeResult(
        outputs={"report": result},
        summary={
            "deployed": result["deployed"],
            "name": result["name"],
            "command": result["command"],
            "bundle_dir": result.get("bundle_dir"),
            "message": result["message"],
        },
    )
