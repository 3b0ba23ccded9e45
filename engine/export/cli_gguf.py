"""``rl-studio-engine export-gguf MODEL_DIR --out FILE.gguf --type q8_0``.

Converts a Hugging Face causal-LM folder (or, with ``--adapter``, a PEFT LoRA
folder) to GGUF with a progress bar on stderr, then prints the verification
report (and ``--json`` the report as JSON on stdout).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.errors import EngineError
from engine.export.types import GGUF_TYPES


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model_dir", type=Path, help="HF model folder (or PEFT adapter folder)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output .gguf file")
    parser.add_argument(
        "--type",
        default="f16",
        type=str.lower,
        choices=GGUF_TYPES,
        help="tensor type, any case (default f16; adapters: f32, f16, bf16, q8_0)",
    )
    parser.add_argument(
        "--adapter", action="store_true", help="MODEL_DIR is a PEFT LoRA adapter folder"
    )
    parser.add_argument(
        "--base", type=Path, default=None, help="base model folder of the adapter"
    )
    parser.add_argument("--name", default=None, help="general.name in the file")
    parser.add_argument(
        "--logit-error",
        action="store_true",
        help="measure the file's logits against the source model (transformers)",
    )
    parser.add_argument(
        "--calibration-text",
        type=Path,
        default=None,
        metavar="FILE",
        help="text file or project dataset (folder, .jsonl, .parquet) to weight "
        "the K-quants by, as llama.cpp's imatrix (K-quant types only)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from engine.export.cli import remove_dead_exports
    from engine.export.gguf import export_gguf, export_lora_gguf
    from engine.export.types import imatrix_problem
    from engine.progress import ProgressBar

    if not str(args.out).endswith(".gguf"):
        raise EngineError(f"--out must name a .gguf file, not {args.out}.")
    remove_dead_exports(args.out)
    if args.calibration_text is not None:
        problem = imatrix_problem(args.type, args.adapter)
        if problem:
            raise EngineError(problem)
    bar = ProgressBar("export-gguf", quiet=args.quiet)
    if args.adapter:
        report = export_lora_gguf(args.model_dir, args.out, args.type, args.base, bar)
    else:
        imatrix = None
        if args.calibration_text is not None:
            from engine.export.imatrix import collect_imatrix

            imatrix = collect_imatrix(
                args.model_dir,
                args.calibration_text,
                ProgressBar("imatrix", quiet=args.quiet),
            )
        report = export_gguf(
            args.model_dir, args.out, args.type, bar, name=args.name, imatrix=imatrix
        )
        if args.logit_error:
            from engine.export.jobs import logit_error_without_imatrix
            from engine.export.logit_check import logit_error

            report.logit_error = logit_error(args.model_dir, args.out)
            if imatrix is not None:
                report.logit_error_without_imatrix = logit_error_without_imatrix(
                    args.model_dir, args.out, args.type
                )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
    return 0 if report.verified else 1
