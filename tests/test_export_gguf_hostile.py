"""Broken model folders are refused before anything is written, in one
sentence naming the tensor or config field: weights that are NaN, infinite
or absurd, configs that contradict their tensors or hold impossible numbers,
malformed tokenizers; and "Verified: yes" means the file read back has the
config's hyperparameters and shapes. A fuzz over 600 malformed folders finds
no other exception."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engine_harness import ROOT
from gguf_fuzz_support import (
    TINY_CONFIG,
    tiny_tensors,
    tiny_tokenizer,
    write_tiny_model,
)

from engine.errors import EngineError
from engine.export.gguf import export_gguf, read_gguf_header, verify_gguf

OLD = b"a GGUF file saved earlier"


def _refused(folder: Path, out: Path, gguf_type: str = "f16") -> str:
    """The one sentence export_gguf refuses ``folder`` with; checks that the
    file saved earlier at ``out`` is untouched and no temporary file is left."""
    out.write_bytes(OLD)
    with pytest.raises(EngineError) as info:
        export_gguf(folder, out, gguf_type)
    message = str(info.value)
    assert "\n" not in message and len(message) < 600, message
    assert out.read_bytes() == OLD
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]
    return message


def _with(**changes: Any) -> dict[str, Any]:
    cfg = dict(TINY_CONFIG)
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize(
    ("value", "name"),
    [(float("nan"), "nan"), (float("inf"), "inf"), (-float("inf"), "-inf"),
     (3e38, "3e+38"), (70000.0, "70000")],
)  # fmt: skip
@pytest.mark.parametrize("gguf_type", ["f16", "q8_0", "q4_k_m"])
def test_a_weight_that_is_nan_inf_or_absurd_is_refused(
    tmp_path: Path, value: float, name: str, gguf_type: str
) -> None:
    tensors = tiny_tensors(TINY_CONFIG)
    tensors["model.layers.1.mlp.up_proj.weight"][5, 3] = value
    folder = write_tiny_model(tmp_path / "m", tensors=tensors)
    (tmp_path / "out").mkdir()
    message = _refused(folder, tmp_path / "out" / "m.gguf", gguf_type)
    assert "model.layers.1.mlp.up_proj.weight" in message
    assert name in message and "row 5" in message


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (_with(hidden_size=32), "hidden_size"),
        (_with(num_hidden_layers=3), "model.layers.2"),
        (_with(num_hidden_layers=1), "num_hidden_layers 1"),
        (_with(vocab_size=10), "vocab_size"),
        (_with(intermediate_size=31), "intermediate_size"),
        (_with(num_key_value_heads=2), "num_key_value_heads"),
        (_with(hidden_size=0), "hidden_size = 0"),
        (_with(hidden_size=-1), "hidden_size = -1"),
        (_with(num_attention_heads=3), "num_attention_heads 3"),
        (_with(vocab_size=2**40), "vocab_size = 1099511627776"),
        (_with(rope_theta=float("nan")), "rope_theta = nan"),
        (_with(rope_theta=-5), "rope_theta = -5"),
        (_with(rms_norm_eps=float("inf")), "rms_norm_eps = inf"),
        (_with(num_key_value_heads=3, num_attention_heads=4), "num_key_value_heads"),
        (_with(hidden_size="16"), "hidden_size = '16'"),
        (_with(hidden_size=True), "hidden_size = True"),
        (_with(max_position_embeddings=10**30), "max_position_embeddings"),
        (_with(head_dim=0), "head_dim = 0"),
        (_with(rope_parameters=[1]), "rope_parameters"),
        (_with(architectures="Qwen2ForCausalLM" * 500), "Cannot export"),
    ],
)
def test_a_config_that_contradicts_its_tensors_or_holds_absurd_numbers_is_refused(
    tmp_path: Path, cfg: dict[str, Any], field: str
) -> None:
    folder = write_tiny_model(tmp_path / "m", cfg=cfg)
    (tmp_path / "out").mkdir()
    message = _refused(folder, tmp_path / "out" / "m.gguf")
    assert field in message
    assert len(message) < 400  # a 8,000-character value is quoted short


def test_a_missing_tensor_is_refused_naming_it(tmp_path: Path) -> None:
    tensors = tiny_tensors(TINY_CONFIG)
    del tensors["model.layers.1.self_attn.v_proj.weight"]
    folder = write_tiny_model(tmp_path / "m", tensors=tensors)
    (tmp_path / "out").mkdir()
    message = _refused(folder, tmp_path / "out" / "m.gguf")
    assert "model.layers.1.self_attn.v_proj.weight is missing" in message


@pytest.mark.parametrize(
    ("tokenizer", "part"),
    [
        ("[1, 2]", "not a JSON object"),
        ('{"model": []}', "'model' is not an object"),
        ('{"model": {"type": "BPE", "vocab": [1]}}', "'model.vocab'"),
        ('{"model": {"type": "BPE", "vocab": {"a": 1099511627776}}}', "token 'a'"),
        ('{"model": {"type": "BPE", "vocab": {"a": "0"}}}', "token 'a'"),
        ('{"model": {"type": "BPE", "vocab": {}, "merges": 3}}', "'model.merges'"),
        ('{"model": {"type": "BPE", "vocab": {}}, "added_tokens": [7]}', "added"),
        ('{"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": 5}', "pre_tok"),
        ("{", "not valid JSON"),
    ],
)
def test_a_malformed_tokenizer_is_one_sentence(
    tmp_path: Path, tokenizer: str, part: str
) -> None:
    folder = write_tiny_model(tmp_path / "m", tokenizer=tokenizer)
    (tmp_path / "out").mkdir()
    assert part in _refused(folder, tmp_path / "out" / "m.gguf")


def test_a_malformed_sentencepiece_model_is_one_sentence(tmp_path: Path) -> None:
    folder = write_tiny_model(tmp_path / "m", tokenizer="{}")
    (folder / "tokenizer.json").unlink()
    # field 1 (a piece) holding field 2 with wire type 5 cut short: struct.error
    (folder / "tokenizer.model").write_bytes(b"\x0a\x03\x15\x00\x00")
    (tmp_path / "out").mkdir()
    assert "not a valid SentencePiece model" in _refused(
        folder, tmp_path / "out" / "m.gguf"
    )


def test_verification_compares_the_file_with_the_config(tmp_path: Path) -> None:
    folder = write_tiny_model(tmp_path / "m")
    out = tmp_path / "m.gguf"
    report = export_gguf(folder, out, "q8_0")
    assert report.verified, report.checks
    assert "10 hyperparameters as configured" in report.checks
    kv, infos = read_gguf_header(out)
    shapes = {name: shape for name, shape, _ in infos}
    assert kv["qwen2.embedding_length"] == 16 and kv["qwen2.block_count"] == 2
    required = ["qwen2.block_count"]
    ok, checks = verify_gguf(out, required, shapes, {"qwen2.block_count": 3})
    assert not ok and "qwen2.block_count 2 != 3" in " ".join(checks)
    ok, _ = verify_gguf(out, required, {**shapes, "token_embd.weight": (10, 16)})
    assert not ok
    ok, _ = verify_gguf(out, required, shapes, {"qwen2.rope.freq_base": 10000.0})
    assert ok


def test_the_cli_says_one_sentence_and_exits_non_zero(tmp_path: Path) -> None:
    folder = write_tiny_model(tmp_path / "m", cfg=_with(vocab_size=2**40))
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "export-gguf", str(folder),
         "--out", str(tmp_path / "m.gguf"), "--quiet"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "vocab_size" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "m.gguf").exists()


# --------------------------------------------------------------------------
# fuzz: malformed folders

_BAD_INTS: list[Any] = [0, -1, -(2**63), 2**40, 10**30, 1.5, "16", "", True,
                        None, [], {}, float("nan"), float("inf")]  # fmt: skip
_BAD_FLOATS: list[Any] = [0, -1.0, float("nan"), float("inf"), -float("inf"),
                          "1e4", True, [], {}, 1e300]  # fmt: skip
_JUNK: list[Any] = [None, 0, -1, 2**64, 1.5, "", "x" * 3000, "\ud800", [], {},
                    [1, "a"], {"a": None}, True, float("nan")]  # fmt: skip


def _mutate_config(rng: random.Random) -> tuple[dict[str, Any], bool]:
    cfg = dict(TINY_CONFIG)
    key = rng.choice(["hidden_size", "intermediate_size", "num_attention_heads",
                      "num_hidden_layers", "vocab_size", "num_key_value_heads",
                      "max_position_embeddings", "head_dim", "rope_theta",
                      "rms_norm_eps", "architectures", "rope_parameters"])  # fmt: skip
    if key in ("rope_theta", "rms_norm_eps"):
        cfg[key] = rng.choice(_BAD_FLOATS)
    elif key in ("architectures", "rope_parameters"):
        cfg[key] = rng.choice([v for v in _JUNK if v not in (None, [], {})])
    else:
        cfg[key] = rng.choice(_BAD_INTS)
    # num_key_value_heads and max_position_embeddings take None as default,
    # head_dim None as hidden_size / heads; every other value is broken.
    broken = not (
        cfg[key] is None
        and key in ("num_key_value_heads", "max_position_embeddings", "head_dim")
    )
    if key == "rope_parameters" and cfg[key] in ("", 0, False):
        broken = False  # an empty value, as an absent one
    return cfg, broken


def _mutate_tensors(rng: random.Random) -> tuple[dict[str, np.ndarray], bool]:
    tensors = tiny_tensors(TINY_CONFIG)
    name = rng.choice(sorted(tensors))
    what = rng.randrange(6)
    if what == 0:
        del tensors[name]
    elif what == 1:
        t = tensors[name]
        tensors[name] = np.zeros((t.shape[0] + 1, *t.shape[1:]), np.float32)
    elif what == 2:
        t = tensors[name].copy()
        t.flat[rng.randrange(t.size)] = rng.choice(
            [float("nan"), float("inf"), -3e38, 1e5]
        )
        tensors[name] = t
    elif what == 3:
        tensors[name] = tensors[name].astype(rng.choice([np.int32, np.int8]))
    elif what == 4:
        extra = rng.choice(
            ["model.layers.7.mlp.up_proj.weight", "model.layers.x.mlp.up_proj.weight",
             "model.extra.weight"]
        )  # fmt: skip
        tensors[extra] = np.zeros(4, np.float32)
    else:
        flat = tensors[name].reshape(-1)
        # flattening a 1-D norm leaves it as it was: the only harmless change
        broken = flat.shape != tensors[name].shape
        tensors[name] = flat
        return tensors, broken
    return tensors, True


def _mutate_tokenizer(rng: random.Random) -> Any:
    tj: Any = copy.deepcopy(tiny_tokenizer(TINY_CONFIG["vocab_size"]))
    node, key = rng.choice([
        (tj, "model"), (tj, "added_tokens"), (tj, "pre_tokenizer"),
        (tj, "decoder"), (tj["model"], "vocab"), (tj["model"], "merges"),
        (tj["model"], "type"), (tj["added_tokens"][0], "id"),
        (tj["added_tokens"][0], "content"), (tj["model"]["vocab"], "a"),
        (tj["pre_tokenizer"], "pretokenizers"),
    ])  # fmt: skip
    node[key] = rng.choice(_JUNK)
    if rng.random() < 0.2:
        return json.dumps(tj)[: rng.randrange(1, 200)]
    return tj


def test_fuzz_600_malformed_model_folders(tmp_path: Path) -> None:
    """Every folder is refused with one sentence or exported and verified;
    a folder known to be broken is never exported."""
    rng = random.Random(26)
    kinds = {"config": 0, "tensors": 0, "tokenizer": 0, "files": 0}
    crashes: list[str] = []
    wrongly_exported: list[str] = []
    for case in range(600):
        folder = tmp_path / f"m{case}"
        kind = list(kinds)[case % 4]
        kinds[kind] += 1
        broken = True
        if kind == "config":
            cfg, broken = _mutate_config(rng)
            write_tiny_model(folder, cfg=cfg)
        elif kind == "tensors":
            tensors, broken = _mutate_tensors(rng)
            write_tiny_model(folder, tensors=tensors)
        elif kind == "tokenizer":
            write_tiny_model(folder, tokenizer=_mutate_tokenizer(rng))
            broken = False  # some junk (a null decoder) is harmless
        else:
            write_tiny_model(folder)
            victim = folder / rng.choice(
                ["config.json", "model.safetensors", "tokenizer.json"]
            )
            data = victim.read_bytes()
            cut = rng.randrange(len(data))
            victim.write_bytes(
                rng.choice([data[:cut], data[:cut] + os.urandom(rng.randrange(1, 64))])
            )
        out = tmp_path / "out" / f"m{case}.gguf"
        try:
            report = export_gguf(folder, out, rng.choice(["f16", "q8_0", "q4_k_m"]))
        except EngineError as exc:
            if "\n" in str(exc) or len(str(exc)) > 600:
                crashes.append(f"case {case} ({kind}): not one sentence: {exc!s:.300}")
            assert not out.exists()
            continue
        except Exception as exc:  # what the fuzz looks for
            crashes.append(f"case {case} ({kind}): {type(exc).__name__}: {exc!s:.200}")
            continue
        if not report.verified or broken:
            wrongly_exported.append(f"case {case} ({kind}): {report.checks}")
    assert sum(kinds.values()) >= 500
    assert crashes == [], "\n".join(crashes)
    assert wrongly_exported == []
    leftovers = [p.name for p in (tmp_path / "out").glob(".*")]
    assert leftovers == []
