"""``rl-studio-engine deploy-ollama FILE.gguf --name NAME [--host URL]``.

Uploads the GGUF to an Ollama server and creates the model with a template
and stop tokens for its chat family; without a server, writes a bundle folder
with the GGUF, a Modelfile and the ``ollama create`` command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.contract import DEFAULT_OLLAMA_HOST
from engine.errors import EngineError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("gguf", type=Path, help="model .gguf file")
    parser.add_argument(
        "--name", required=True, help="Ollama model name, e.g. jira-agent:q8"
    )
    parser.add_argument("--host", default=DEFAULT_OLLAMA_HOST, help="Ollama server URL")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument(
        "--quantize",
        default=None,
        choices=("q4_K_M", "q4_K_S", "q8_0"),
        help="let Ollama quantize an F16/BF16/F32 GGUF",
    )
    parser.add_argument("--adapter", type=Path, default=None, help="LoRA adapter .gguf")
    parser.add_argument(
        "--family",
        default=None,
        choices=("chatml", "llama3", "mistral", "phi3", "gemma"),
        help="chat-template family (default: detected)",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Modelfile PARAMETER, e.g. temperature=0.2 (repeatable)",
    )
    parser.add_argument(
        "--bundle-dir",
        type=Path,
        default=None,
        help="folder for the offline bundle (also written after a deployment)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _params(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise EngineError(f"--param needs KEY=VALUE, not {item!r}.")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        key = key.strip()
        if key == "stop":
            out.setdefault("stop", []).append(str(value))
        else:
            out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    from engine.export.ollama import BUNDLE_ONLY_EXIT, deploy_gguf
    from engine.progress import ProgressBar

    result = deploy_gguf(
        args.gguf,
        args.name,
        host=args.host,
        system=args.system,
        parameters=_params(args.param),
        quantize=args.quantize,
        adapter_path=args.adapter,
        family=args.family,
        bundle_dir=args.bundle_dir,
        always_bundle=args.bundle_dir is not None,
        progress=ProgressBar("upload", quiet=args.quiet),
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.message)
        for w in result.warnings:
            print(f"Warning: {w}")
        print(result.command)
    if not result.deployed:
        print(
            "rl-studio-engine deploy-ollama: deployed nothing; the bundle is in "
            f"{result.bundle_dir}.",
            file=sys.stderr,
        )
        return BUNDLE_ONLY_EXIT
    return 0
