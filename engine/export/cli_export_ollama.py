"""``rl-studio-engine export-ollama MODEL_DIR --name NAME [--type q4_k_m]
[--host URL] [--calibration-text FILE]``: the one-click export (merge → GGUF
→ deploy) headless.

Exits 0 when the model was created on the server, 3 when no server answered
and only an import bundle was written, 2 with one sentence on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.export.ollama import BUNDLE_ONLY_EXIT, file_stem
from engine.export.ollama_job import EXPORT_TYPES, OllamaExportConfig
from engine.settings import fields_of


def configure(parser: argparse.ArgumentParser) -> None:
    defaults = OllamaExportConfig()
    parser.add_argument(
        "model_dir",
        type=Path,
        metavar="MODEL_DIR",
        help="LoRA adapter folder, model folder or .gguf file",
    )
    parser.add_argument("--name", required=True, help="Ollama model name")
    parser.add_argument(
        "--type",
        default=defaults.type,
        type=str.lower,
        choices=EXPORT_TYPES,
        help=f"tensor type (default {defaults.type}; ollama-q4_k_* are made by Ollama)",
    )
    parser.add_argument("--host", default=defaults.host, help="Ollama server URL")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--base", default=None, help="an adapter's base model")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the merged model, the GGUF and a bundle "
        "(default ./NAME-export)",
    )
    calibration = fields_of(OllamaExportConfig)["calibration_text"]
    parser.add_argument(
        "--calibration-text",
        type=Path,
        default=calibration.default,
        metavar="FILE",
        help=calibration.help,
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from engine.export.ollama_job import export_to_ollama, validate
    from engine.progress import ProgressBar
    from engine.store.atomic import remove_stale_temp_files

    cfg = validate(
        {
            "model": str(args.model_dir),
            "name": args.name,
            "type": args.type,
            "host": args.host,
            "system": args.system,
            "base": args.base,
            "calibration_text": (
                None if args.calibration_text is None else str(args.calibration_text)
            ),
        }
    )
    assert cfg.name is not None  # validate requires it
    work_dir = args.out or Path.cwd() / f"{file_stem(cfg.name)}-export"
    work_dir.mkdir(parents=True, exist_ok=True)
    # What a killed export left in its own folder: the pid proves it dead.
    remove_stale_temp_files(work_dir, older_than=0)
    result = export_to_ollama(
        cfg,
        work_dir,
        progress=ProgressBar("export", quiet=args.quiet),
        log=None if args.quiet or args.json else print,
    )
    deploy = result.deploy
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(deploy.get("command", ""))
    if not deploy.get("deployed"):
        print(
            f"rl-studio-engine export-ollama: deployed nothing; the bundle is in "
            f"{deploy.get('bundle_dir')}.",
            file=sys.stderr,
        )
        return BUNDLE_ONLY_EXIT
    return 0
