"""``rl-studio-engine export-onnx POLICY.zip --out FILE.onnx``: an SB3 policy
to ONNX (observation in, deterministic action out), checked with
onnxruntime against the policy."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", type=Path, help="stable-baselines3 model .zip")
    parser.add_argument("--out", type=Path, required=True, help="output .onnx file")
    parser.add_argument(
        "--samples", type=int, default=64, help="observations compared (default 64)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from engine.errors import EngineError
    from engine.export.cli import remove_dead_exports
    from engine.export.onnx_export import export_onnx

    if not str(args.out).endswith(".onnx"):
        raise EngineError(f"--out must name a .onnx file, not {args.out}.")
    remove_dead_exports(args.out)
    report = export_onnx(args.policy, args.out, samples=args.samples)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0
