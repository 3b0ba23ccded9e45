"""Ollama Modelfiles: chat-template families and their Go templates.

Ollama guesses a template from a GGUF's Jinja chat template only when it is
close to one it knows; otherwise the model answers garbage. So the studio
detects the family from the tokenizer's chat template or special tokens and
always writes an explicit ``TEMPLATE`` with the matching ``stop`` parameters.
An unknown family leaves the GGUF's own template in charge, with a warning.

Stdlib only: the GUI may build a Modelfile preview without the engine's heavy
libraries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError

FAMILIES = ("chatml", "llama3", "mistral", "phi3", "gemma")

# Ollama Go templates. In templates that range over .Messages, Ollama puts the
# SYSTEM prompt in .Messages as a "system" message (and in .System).
TEMPLATES: dict[str, str] = {
    "chatml": (
        "{{- range .Messages }}<|im_start|>{{ .Role }}\n"
        "{{ .Content }}<|im_end|>\n"
        "{{ end }}<|im_start|>assistant\n"
    ),
    "llama3": (
        "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
        "{{ .Content }}<|eot_id|>\n"
        "{{- end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    # Mistral has no system role: the system prompt goes before the last user
    # message, as Mistral's own template does.
    "mistral": (
        "{{- range $i, $_ := .Messages }}\n"
        '{{- if eq .Role "user" }}[INST] '
        "{{ if and (eq (len (slice $.Messages $i)) 1) $.System }}{{ $.System }}\n\n"
        "{{ end }}{{ .Content }}[/INST]\n"
        '{{- else if eq .Role "assistant" }} {{ .Content }}</s>\n'
        "{{- end }}\n"
        "{{- end }}"
    ),
    "phi3": (
        "{{- range .Messages }}<|{{ .Role }}|>\n"
        "{{ .Content }}<|end|>\n"
        "{{ end }}<|assistant|>\n"
    ),
    # Gemma has no system role either: system text is sent as a user turn; the
    # assistant's role is called "model".
    "gemma": (
        "{{- range $i, $_ := .Messages }}\n"
        "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
        '{{- if or (eq .Role "user") (eq .Role "system") }}<start_of_turn>user\n'
        "{{ .Content }}<end_of_turn>\n"
        "{{ if $last }}<start_of_turn>model\n"
        "{{ end }}\n"
        '{{- else if eq .Role "assistant" }}<start_of_turn>model\n'
        "{{ .Content }}{{ if not $last }}<end_of_turn>\n"
        "{{ end }}\n"
        "{{- end }}\n"
        "{{- end }}"
    ),
}

STOPS: dict[str, tuple[str, ...]] = {
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "llama3": ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    "mistral": ("[INST]", "[/INST]"),
    "phi3": ("<|end|>", "<|user|>", "<|assistant|>", "<|system|>"),
    "gemma": ("<start_of_turn>", "<end_of_turn>"),
}

# Markers in a Jinja chat template or the special-token list, most specific first.
_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llama3", ("<|start_header_id|>", "<|eot_id|>")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),
    ("gemma", ("<start_of_turn>", "<end_of_turn>")),
    ("phi3", ("<|user|>", "<|end|>", "<|assistant|>")),
    ("mistral", ("[INST]", "[/INST]")),
)


def detect_family(
    chat_template: str | None = None, special_tokens: Iterable[str] = ()
) -> str | None:
    """The chat-template family (one of ``FAMILIES``) or None when unknown.

    The chat template decides; the special tokens are used when there is no
    template (a base model whose tokenizer still has the chat tokens).
    """
    if chat_template:
        for family, markers in _MARKERS:
            if markers[0] in chat_template or (
                len(markers) > 1 and all(m in chat_template for m in markers[1:])
            ):
                return family
        return None
    tokens = set(special_tokens)
    for family, markers in _MARKERS:
        if markers[0] in tokens:
            return family
    return None


@dataclass
class Modelfile:
    """A Modelfile and the pieces the Ollama API takes separately."""

    text: str
    family: str | None
    template: str | None
    """The Go template written, None when the GGUF's own template is used."""
    stop: list[str] = field(default_factory=list)
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    """All parameters including ``stop``, as /api/create takes them."""
    warnings: list[str] = field(default_factory=list)


def _quote_block(keyword: str, text: str) -> str:
    if '"""' in text:
        raise EngineError(
            f'The {keyword} text cannot contain three double quotes (""").'
        )
    return f'{keyword} """{text}"""'


def _param_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def build_modelfile(
    from_ref: str,
    *,
    chat_template: str | None = None,
    special_tokens: Iterable[str] = (),
    family: str | None = None,
    adapter: str | None = None,
    system: str | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> Modelfile:
    """Modelfile text for ``from_ref`` (a GGUF path, a blob reference or a base
    model name). ``family`` overrides detection; ``parameters`` may hold
    ``temperature``, ``num_ctx`` ... and extra ``stop`` strings (a list)."""
    if family is not None and family not in FAMILIES:
        raise EngineError(
            f"Unknown chat-template family {family!r}; choose one of "
            f"{', '.join(FAMILIES)}."
        )
    fam = family or detect_family(chat_template, special_tokens)
    warnings: list[str] = []
    params: dict[str, Any] = {}
    extra_stop: list[str] = []
    for key, value in (parameters or {}).items():
        if key == "stop":
            extra_stop.extend([value] if isinstance(value, str) else list(value))
        else:
            params[key] = value
    stop = list(STOPS[fam]) if fam else []
    stop += [s for s in extra_stop if s not in stop]
    template = TEMPLATES[fam] if fam else None
    if fam is None:
        warnings.append(
            "The chat template matches no known family (ChatML, Llama 3, Mistral, "
            "Phi-3, Gemma); Ollama will use the GGUF's own template, which it may "
            "not understand: check the answers, or pick a family."
        )
    lines = [f"FROM {from_ref}"]
    if adapter:
        lines.append(f"ADAPTER {adapter}")
    if template is not None:
        lines.append(_quote_block("TEMPLATE", template))
    if system:
        lines.append(_quote_block("SYSTEM", system))
    for s in stop:
        lines.append(f"PARAMETER stop {_param_value(s)}")
    for key, value in params.items():
        lines.append(f"PARAMETER {key} {_param_value(value)}")
    if stop:
        params["stop"] = stop
    return Modelfile(
        text="\n".join(lines) + "\n",
        family=fam,
        template=template,
        stop=stop,
        system=system or None,
        parameters=params,
        warnings=warnings,
    )


def modelfile_for_gguf(
    gguf_path: str,
    *,
    from_ref: str | None = None,
    adapter: str | None = None,
    system: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    family: str | None = None,
    chat_template: str | None = None,
) -> Modelfile:
    """A Modelfile for a GGUF on disk, the family read from its chat template
    and control tokens (or from ``chat_template``, e.g. the base model's when
    the GGUF is an adapter)."""
    from engine.export.gguf import read_gguf_summary

    summary = read_gguf_summary(gguf_path)
    template = chat_template if chat_template is not None else summary["chat_template"]
    if isinstance(template, list):  # named templates: use the default one
        template = next(
            (t.get("template") for t in template if isinstance(t, dict)), None
        )
    return build_modelfile(
        from_ref or gguf_path,
        chat_template=template if isinstance(template, str) else None,
        special_tokens=summary["special_tokens"],
        family=family,
        adapter=adapter,
        system=system,
        parameters=parameters,
    )
