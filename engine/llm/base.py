"""Base language models: where they are, what they are, which chat format.

A base model is a local Hugging Face folder or a hub id (``org/name``)
resolved from the local Hugging Face cache only: training never downloads
(``hub.download`` / ``rl-studio-engine hub download`` fills the cache,
:mod:`engine.llm.hub`).
Everything here reads JSON files only (no torch, no transformers), so the
supervisor can validate a job that names a model in milliseconds.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
ADAPTER_CONFIG = "adapter_config.json"

CHAT_FAMILIES = ("chatml", "llama3", "mistral", "phi3", "gemma", "unknown")
"""Chat template families :func:`detect_chat_family` tells apart."""

# The markers each family's template contains, checked in this order (Phi-3
# before ChatML: both use ``<|end|>``-like tokens but only ChatML has
# ``<|im_start|>``).
_FAMILY_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("chatml", ("<|im_start|>",)),
    ("llama3", ("<|start_header_id|>",)),
    ("gemma", ("<start_of_turn>",)),
    ("phi3", ("<|user|>", "<|end|>")),
    ("mistral", ("[INST]",)),
)

STOP_TOKENS: dict[str, list[str]] = {
    "chatml": ["<|im_start|>", "<|im_end|>"],
    "llama3": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "mistral": ["[INST]", "</s>"],
    "phi3": ["<|end|>", "<|user|>", "<|endoftext|>"],
    "gemma": ["<start_of_turn>", "<end_of_turn>"],
    "unknown": [],
}


@dataclass
class ModelInfo:
    """What a model folder holds, read from its JSON files."""

    path: str
    """Absolute folder path."""
    kind: str
    """``hf`` (full weights) or ``lora-adapter``."""
    model_type: str
    """``config.json`` model_type (``qwen2``, ``llama``, ...)."""
    architectures: list[str]
    chat_family: str
    """One of :data:`CHAT_FAMILIES`."""
    special_tokens: dict[str, str]
    """``bos``, ``eos``, ``pad``, ``unk`` and extra special tokens by name."""
    stop_tokens: list[str]
    """Tokens that end an assistant turn in this family."""
    base: str | None = None
    """For an adapter: the base model folder it was trained on."""
    num_layers: int | None = None
    hidden_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    has_chat_template: bool = False
    """True when the folder (or an adapter's base) carries a chat template."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def hf_cache_dirs() -> list[Path]:
    """Folders where the Hugging Face hub cache may live, most specific first."""
    dirs: list[Path] = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def _from_cache(repo_id: str) -> Path | None:
    folder_name = "models--" + repo_id.replace("/", "--")
    for cache in hf_cache_dirs():
        repo = cache / folder_name
        snapshots = repo / "snapshots"
        if not snapshots.is_dir():
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            snap = snapshots / ref.read_text(encoding="utf-8").strip()
            if snap.is_dir():
                return snap
        candidates = sorted(
            (p for p in snapshots.iterdir() if p.is_dir()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        if candidates:
            return candidates[0]
    return None


def resolve_model(ref: str | Path, field_name: str = "model") -> Path:
    """The local folder of a model given as a folder path or a hub id.

    Raises ConfigError(``field_name``) with one sentence saying where the
    model should be when it cannot be found or is incomplete.
    """
    text = str(ref).strip()
    if not text:
        raise ConfigError(field_name, f"{field_name} is empty; name a model folder.")
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ConfigError(
                field_name, f"{field_name} {path} is a file; it must be a model folder."
            )
        check_model_folder(path, field_name)
        return path.resolve()
    looks_like_id = text.count("/") == 1 and not text.startswith((".", "/", "~"))
    if looks_like_id:
        snap = _from_cache(text)
        if snap is not None:
            check_model_folder(snap, field_name)
            return snap
        raise ConfigError(
            field_name,
            f"Model {text!r} is not in the local Hugging Face cache "
            f"({hf_cache_dirs()[0]}) and this engine works offline; download it "
            f"there (Models → Download from the Hub…, or rl-studio-engine hub "
            f"download {text}) or give a local model folder.",
        )
    raise ConfigError(
        field_name,
        f"Model folder {path} does not exist; put a Hugging Face model folder "
        "there (config.json, weights, tokenizer) or give a hub id already in "
        "the local cache.",
    )


def is_adapter(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file()


def _has_weights(folder: Path) -> bool:
    return any(any(folder.glob(p)) for p in WEIGHT_PATTERNS) or any(
        folder.glob("*.safetensors.index.json")
    )


def check_model_folder(folder: Path, field_name: str = "model") -> None:
    """Raise ConfigError when ``folder`` lacks what loading it needs."""
    if is_adapter(folder):
        if not any(folder.glob("adapter_model.*")):
            raise ConfigError(
                field_name,
                f"The adapter folder {folder} has adapter_config.json but no "
                "adapter_model weights; train the adapter again.",
            )
        return
    if not (folder / "config.json").is_file():
        raise ConfigError(
            field_name,
            f"The model folder {folder} has no config.json, so it is not a "
            "Hugging Face model folder; copy the whole model (config.json, "
            "weights, tokenizer) there.",
        )
    if not _has_weights(folder):
        raise ConfigError(
            field_name,
            f"The model folder {folder} has no weights (*.safetensors or "
            "pytorch_model.bin); copy the complete model there.",
        )
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError(
            field_name,
            f"The model folder {folder} has no tokenizer (tokenizer.json); copy "
            "the tokenizer files beside the weights.",
        )


def detect_chat_family(template: str | None) -> str:
    """The chat format family of a Jinja chat template (``unknown`` if none)."""
    if not template:
        return "unknown"
    for family, markers in _FAMILY_MARKERS:
        if all(m in template for m in markers):
            return family
    return "unknown"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def read_chat_template(folder: Path) -> str | None:
    """The chat template from ``chat_template.jinja`` (transformers 5) or
    ``tokenizer_config.json`` (older)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    tpl = _read_json(folder / "tokenizer_config.json").get("chat_template")
    if isinstance(tpl, list):  # named templates: take "default"
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("default") or next(iter(named.values()), None)
    return tpl if isinstance(tpl, str) else None


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    content = value.get("content") if isinstance(value, dict) else None
    return content if isinstance(content, str) else None


def special_tokens(folder: Path) -> dict[str, str]:
    """bos/eos/pad/unk and additional special tokens named in the tokenizer files."""
    cfg = {
        **_read_json(folder / "special_tokens_map.json"),
        **_read_json(folder / "tokenizer_config.json"),
    }
    out: dict[str, str] = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        text = _token_text(cfg.get(key))
        if text:
            out[key.removesuffix("_token")] = text
    extra = cfg.get("additional_special_tokens") or cfg.get("extra_special_tokens")
    if isinstance(extra, list):
        for i, tok in enumerate(extra):
            text = _token_text(tok)
            if text:
                out[f"extra_{i}"] = text
    return out


def inspect_model(ref: str | Path, field_name: str = "model") -> ModelInfo:
    """Resolve ``ref`` and describe it (architecture, chat family, tokens)."""
    folder = resolve_model(ref, field_name)
    if is_adapter(folder):
        acfg = _read_json(folder / ADAPTER_CONFIG)
        base_ref = acfg.get("base_model_name_or_path")
        base_info = inspect_model(base_ref, field_name) if base_ref else None
        tpl_folder = folder if read_chat_template(folder) else None
        family = (
            detect_chat_family(read_chat_template(folder))
            if tpl_folder
            else (base_info.chat_family if base_info else "unknown")
        )
        return ModelInfo(
            path=str(folder),
            kind="lora-adapter",
            model_type=base_info.model_type if base_info else "",
            architectures=base_info.architectures if base_info else [],
            chat_family=family,
            special_tokens=special_tokens(folder)
            or (base_info.special_tokens if base_info else {}),
            stop_tokens=STOP_TOKENS[family],
            base=base_info.path if base_info else None,
            extra={"lora_rank": acfg.get("r"), "lora_alpha": acfg.get("lora_alpha")},
            has_chat_template=tpl_folder is not None
            or bool(base_info and base_info.has_chat_template),
        )
    cfg = _read_json(folder / "config.json")
    text_cfg: dict[str, Any] = (
        cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    )
    template = read_chat_template(folder)
    family = detect_chat_family(template)
    return ModelInfo(
        path=str(folder),
        kind="hf",
        model_type=str(cfg.get("model_type", "")),
        architectures=list(cfg.get("architectures") or []),
        chat_family=family,
        special_tokens=special_tokens(folder),
        stop_tokens=STOP_TOKENS[family],
        num_layers=text_cfg.get("num_hidden_layers"),
        hidden_size=text_cfg.get("hidden_size"),
        has_chat_template=template is not None,
    )


def check_trainable(info: ModelInfo, field_name: str = "model") -> None:
    """Raise ConfigError unless TRL can fine-tune this model as a causal LM."""
    archs = info.architectures
    if info.kind == "hf" and not any(a.endswith("ForCausalLM") for a in archs):
        shown = ", ".join(archs) or "none declared"
        raise ConfigError(
            field_name,
            f"The model at {info.path} has architecture {shown}, which TRL cannot "
            "train as a causal language model; pick a *ForCausalLM model such as "
            "Qwen2.5-0.5B-Instruct.",
        )


def check_chat_template(info: ModelInfo, field_name: str = "model") -> None:
    """Raise ConfigError when the model has no chat template.

    The studio's prompts and datasets are conversations (system, user,
    assistant messages); without a template neither the policy nor TRL can
    turn them into tokens, and transformers would fail deep inside training.
    """
    if not info.has_chat_template:
        raise ConfigError(
            field_name,
            f"The model at {info.path} has no chat template, which the studio's "
            "conversational prompts need; use an instruct model such as "
            "Qwen2.5-0.5B-Instruct or put a chat_template.jinja in the folder.",
        )


def resolve_chat_model(ref: str | Path, field_name: str = "model") -> Path:
    """:func:`resolve_model` for a model that will answer prompts: also
    refuses one without a chat template (the policy renders every prompt
    through it)."""
    info = inspect_model(ref, field_name)
    check_chat_template(info, field_name)
    return Path(info.path)
