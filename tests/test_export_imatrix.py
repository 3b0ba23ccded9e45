"""Importance-matrix K-quants (``engine.export.kquants_imatrix``) and their
calibration (``engine.export.imatrix``): blocks byte-identical to llama.cpp's
``quantize_q*_K`` with ``quant_weights`` for a few embedded blocks, a lower
weighted error than the plain quantizers, collection on a tiny Llama, and
the export job, command and node with their one-sentence refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_tiny_model

from engine.errors import ConfigError, EngineError
from engine.export import gguf as gx
from engine.export import kquants as kq
from engine.export import kquants_imatrix as kw
from engine.export.imatrix import Imatrix, collect_imatrix, read_calibration_text
from engine.settings import as_dict

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[1]
F = np.float32
K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
LEGACY_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1")


def _reference_input() -> tuple[np.ndarray, np.ndarray]:
    """One row of two super-blocks, in exact float32 arithmetic: a zero
    sub-block, an all-positive one, an outlier and columns of no importance."""
    i = np.arange(512, dtype=np.int64)
    x = (((i * 7919) % 1000) - 500).astype(F) / F(1000)
    x[16:32] = 0
    x[64:96] = np.abs(x[64:96])
    x[300] *= F(8)
    w = (((i * 104729) % 97) + 1).astype(F) / F(16)
    w[200:232] = 0
    return x.reshape(1, 512), w


# llama.cpp's quantize_q*_K / quantize_q4_0 ... q5_1(x, dst, 1, 512, w) of
# _reference_input(), from
# ggml-quants.c built with gcc -O2 (tests/benchmarks/test_bench_imatrix_llama_cpp.py
# compares many more blocks where such a build is at hand).
LLAMA_CPP_BYTES = {
    "Q2_K": (
        "bb00bbdc1706ecdcecfcedebbcffbcbb642713d2c2d2ddadadb8787864271313c0c0dcacacb87878"
        "74242410c0c0dc9cd29e9e8d49497874272727e3d29e9e8d8d4d7978242727e3d3d29e9e8d4d4978"
        "9f250828d6c6dfc6e6d6f6e7f6d6a6d7a6b6d6d685747474332323e2d2d6d5858d847474372723e2"
        "d29e9d8d89487874372723e22323d3d2de8e8989497874242723e3d3d2de8d8989487474272723d2"
        "d2de8d895929be27"
    ),
    "Q3_K": (
        "60515159ddd9bbbbaaaaa26262415151eeeaa8a888989812525272726eeee8a89caf7afac5b5ac68"
        "5b06c6c191af6b7accbcb46468180cc0d0a46878cc8cb0644f94a8e93d3e4293a5e5fa0a4f97a4e9"
        "3b3645519ceffb3645519cecfb3a76412da00e9579076e6f03b20f3cfc1cbeb27272535343cfcf8d"
        "adacbcb632729ababaa6a62565655d5d5bdbdababaa632c1d190637736c6d59c6c6f32f2d190a4b9"
        "fa4e8f90d4e9293e5353a4a5f94eebfb0e4d91a4e73b3e4d9194e7fb3e4db1bc6c6b16d6f1a1af5b"
        "5ac585bc7c6baac560b565c46ac366a558a53722"
    ),
    "Q4_K": (
        "23140e20fdfce0fffffec0fceeaeff5a705f4e3c1b0af8e7c6b4a382706f4e3d2808f8e8d8c8a898"
        "886858382818f8f83a2715f2e0c3b5a89a7d6f5d4b281603e1d2c4a7998c7e5e4c391604f1d1c4b6"
        "0af9d7c6b59382716f4e3d2c0af9e8d7b5a49371605f3d2c1b0ae8d7c6a49382d7c6a49382615f4e"
        "2d1b0af9e7c6b5a482715f4e3d1c0af9e8d7b5a49372605f791805205d7f5d5df8fefbfedcfdddac"
        "534241302e2d1b1a09776665f44241303e2d1c1a09786765545342303f2d2c1b716f5e4d2b1a09e8"
        "d6c5a49281705e4d3c2b09f8d7c5b4a382706f5e3c2b1af85e3d2c1af9e8d6c5a49281605f4d3c1b"
        "09f8d7c5b49382706f4e3d2b0af9e7c61b0af8e7c6b5a382716f4e3d2b0af9e8d6b5a49271605e3d"
        "2c1b09f8d7c5b493"
    ),
    "Q5_K": (
        "1d100b20fcfde0fffdfec0ffefdfcc7c94b1a1a929296b4e5e5e56d694b5a1a1a9296b4b4f5f57d7"
        "d595b1a1a9292b6bd0ae8b592603e0be8b683613e0bf9c693010f0c090704010f0c0a0704020f0d0"
        "744f2af5c0a67b50250adfaa85503b06d1b4896e3308edbc97624d18e3c2976c14e1bf9c693714e2"
        "cf9c7a4725f2cfad7a4825f3d0ad8b582503d0ae8b593603ae8b5926f3d1af7c5a2704e2bf8c6a37"
        "04e1bf8d6b3805f3c09d7a4815f2c09e4f1414205d7f5e5efbfbfcffedeeeede5854d494b5b5a5ad"
        "296948485a50d4d495b5a5ad29296848585054d495b5a5ada88572605e4b291603e1debbf9968361"
        "5f4c392704e1dfccba9784726f4d3a2802dfac8a573502d0bd8a683503e0bd9b684613e0ce9b6946"
        "14f1ceac794624f19d7b4825f3c0ad7b5825f3d0ae8b593603d1be8c593604e1bf9c6a4714e2cf9c"
        "3614e1bf9c6a4714f2cf9c7a4725f2c0ad7a5825f3d0ad8b583603d0be8b5936"
    ),
    "Q6_K": (
        "b11a65b0fba6510ca7520d4893fc4792f0c06010b060001070c02070d0e08030ea9530fba6510aa5"
        "500ba6510ca7520dda7f22c87d22c87d12c86d12f89d40e6479df247adf2076db0157bc0257bd025"
        "75c00b55b00c57a20c57a20c57a2fc378dd3388de2379de247acf1066bb1166bc01b75c01b75c00b"
        "55a00d57a20d57a2041717d3d2d2de9d8d89484844071713dcdcd090808444444808181cdcdcd090"
        "2d21627276b7878bc8d8dc1d2d2162727db98888c4d7d71322226e7d7db9b888800080787975878a"
        "78877d88740074792088a11b66b10d57a2fd4892ed3882dd4893d3288dd2378ce1368be0056ab106"
        "6bb0fdae5001b36516a85907b96b11ce7f21489ef3398ed0368bd1268cd1268cd1172974df2a85df"
        "2a85d00b56a00b56b10ca751fca6510bd5702fda742ec9731ec89de2277dd1267bd1267bc0267bc0"
        "066b50fca7510cb7611cb7621cc7621ec873754448481b1b1bdaeae6a5b5b1744448c8d8dc1d2d21"
        "627276b7878bc8d8dc1ddbdf1e2e22617175b58488c8dbdf1f2ed29e8d8d89487874372723e2d2de"
        "9d8d26d880dbd8db28da2724da26db25da27990e"
    ),
    "Q4_0": (
        "f22b808f8d8c8b8a888786848382808f8e8d982b1605f4e2d1b0af9e7c6b5a382716f4f370ab8374"
        "6547381605042231406172736556652ce4d3c2bfae8d7b6a59482716f4d3c2b10c2c5a49382605f4"
        "e2c1bfae8d7c6b59382754ac4f61728495a6c7d8eafb2c3d4e51628315acd9fa0b2d3e4f51728395"
        "a6c7d8eafb1c7aab7283a5b6d7e9fa0c1d2e4f50618394b608ac1c2d3e4f617284a5b6c7d9fa0b1d"
        "3e4f4fb2979898a8a9696a6a7a768687809798a818ac4f50617394a5b7c8e9fa1c2d3e4f61727a2c"
        "482716e4d3c2b1ae9d7c6b59483726f5da2bae8d7c6a49382705f4e3d1b0af9e7c6b172c05f4d2c1"
        "bfae8d7c6a59382715f4e3d2712c7b6a49382615e4d3c2bfae8d7b6a59482eac3e4f61728395a6c7"
        "d8eafb1c3d4f5162"
    ),
    "Q4_1": (
        "e32bf2b7808f8e8c8b8a888786848382808f8e8dc32bdfb72705f4e3d1b0af9e7c6b5a382716f4f3"
        "15289e8d1a274572a0c3f5e8ca9d7f4d2b1846630d2ca6b7e3d2c1af9e8d7b5a49372605f4d2c1b0"
        "062cd4b75a49371605f3d2c1bf9e8d7c6a4938260b2c76b7b0af9d7c6b5a48271604e3d2c0af9e8d"
        "112cf5b72716f4e3d2b1af9e8c6b5a49371605e4862bc2b68d7c5a49381605f4e2d1b0af9e7c6b5a"
        "092c16b7e3d2c1b09e8d7b5a49382605f4e2c1b06b30ccb73524141302726161505746363f242413"
        "0d2c6ab7c1bf9e8d7b5a49382605f4e2c1b0ae8d182cd4b7372605f4d2c1b0ae8d7c6a59382715f4"
        "d02ba8b79e8d7c5a49382605f4e2d1b0af9d7c6b082ce0b705f3d2c1bf9e8d7c6a49382605f4e3c1"
        "192c9eb76b5948271604e3d2c1af9e8c7b5a4937c22b4bb7d1c0af9e8c6b5a48271604f3d2c0bf9e"
    ),
    "Q5_0": (
        "b5277ee0ffff000e0b090603000e0b080603000f0c09d627c00ffcc03d1af8c592704e1bf8c6a371"
        "4e2bf9d6fca710000000f6e8bb9e604d1b18457390c2e5f8caad1f28f8033ff0d7b5826f3c1ae7c5"
        "92704d2be8c693712e28037fe007b4826f3d1ad8b5836f3c1ae7c592704df0a7811ff8038fb1d406"
        "395c8ea1d3f6295b7ea0c3f670a73ff0037fc2f5072a5d8fa0d306395b8eb1e4f61976a7e0077ee0"
        "e417396c9fc2f4072a5d7fa0d306385b09a80ffcc00f174a6d9fb2e5173a6c8fb1d407395c8e30ae"
        "fcc11ff81e2f304152b2c3d4e5ebfc0d102f304015a8813ff0037da0c3f5184b6d90b2e5174a6c9f"
        "b2e50a28811ff881604d1ae8c593704d1bf8c6a3715e2bf9de273ff0033f3d1ae8b592603d1af8c5"
        "93704e2bf9c62528f0077ee01ad7b5826f3c1ae7c592704d2be8c6932c2807fec00fd7b4826f3d1a"
        "d8b5836f3c1ae7c5927002a8033ff0076c8fb1d407395c8ea1d3f6295b7ea0d3"
    ),
    "Q5_1": (
        "b627b8b77ee0ffff000e0b090603000e0b080603000f0c09d527ccb7c00ffcc03d1af8c592704e1b"
        "f8c693704e2bf9d61b24ec97813ff003144f9ae53186dbc0752adf8b36217bc60a28eeb7f8033ff0"
        "d7b4826f3c0ae7b592604d1ae8c593600a28d2b7033fe007a4815f3c09d7b4825f3c0ae7b5926f3d"
        "0b28c6b77ee007fc715e2bf9d6a4815f3c09d7b4825f3c0abe2790b7c00ffc814e2bf9d6a3815f2c"
        "09d7a4815f3c0ae7bc27f9b60ff8811f0ae7b5826f3d0af8c592704e1bf8c693d62783b7f0033ff0"
        "f8c592704e1bf8c693704e2bf9d6a3813d2c87b7001000005a48372605e4d2c1b09e8d7b6f493826"
        "0b28a7b7fec00ffc826f3c0ae7b592604d1ae8c593604d1b0d2809b8811ff881604d1ae8c593604d"
        "1bf8c6a3705e2bf9ca27eab73ff0033f4d1be8c593604d1bf8c5a3704e2cf9c60e28dfb7f0037ee0"
        "09d7a4825f3c0ae7b4926f3d1ae8b5930b28dbb7077ec00fd6a4815f3c09d7b4825f3c0ae7b5926f"
        "0928c8b7fcc00ff8a3715e2bf9d6a4815f3c09d7b4825f3c"
    ),
}


@pytest.mark.parametrize("qtype", K_TYPES)
def test_blocks_match_llama_cpp_byte_for_byte(qtype: str) -> None:
    x, w = _reference_input()
    ours = kw.quantize_weighted(x, qtype, w)
    assert ours.shape == (1, 2 * kq.BLOCK_BYTES[qtype])
    assert ours.tobytes().hex() == LLAMA_CPP_BYTES[qtype]


@pytest.mark.parametrize("qtype", LEGACY_TYPES)
def test_fallback_blocks_match_llama_cpp_byte_for_byte(qtype: str) -> None:
    x, w = _reference_input()
    ours = kw.quantize_legacy_weighted(x, qtype, w)
    assert ours.tobytes().hex() == LLAMA_CPP_BYTES[qtype]
    # Read back by gguf: close to the values.
    back = gguf.quants.dequantize(ours, gguf.GGMLQuantizationType[qtype])
    assert np.abs(back - x).max() < 0.35


def _skewed(rows: int = 96, cols: int = 512) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, cols)).astype(F) * F(0.05)
    # A few columns matter a hundred times more, as outlier channels do.
    importance = np.full(cols, 0.01, F)
    importance[rng.choice(cols, cols // 10, replace=False)] = 1.0
    return x, importance


@pytest.mark.parametrize("qtype", K_TYPES)
def test_the_importance_lowers_the_error_where_it_matters(qtype: str) -> None:
    x, importance = _skewed()
    t = gguf.GGMLQuantizationType[qtype]
    weighted = gguf.quants.dequantize(kw.quantize_weighted(x, qtype, importance), t)
    plain = gguf.quants.dequantize(kq.quantize(x, qtype), t)
    assert weighted.shape == x.shape

    def err(y: np.ndarray) -> float:
        return float((importance * (x - y) ** 2).sum())

    assert err(weighted) < 0.9 * err(plain), qtype
    # Read back by gguf's dequantizer: close to the values everywhere.
    rel = float(np.sqrt(((x - weighted) ** 2).mean() / (x**2).mean()))
    assert (
        rel < {"Q2_K": 0.6, "Q3_K": 0.35, "Q4_K": 0.2, "Q5_K": 0.1, "Q6_K": 0.05}[qtype]
    ), (qtype, rel)


def test_rows_quantize_alike_in_any_grouping_and_must_fit() -> None:
    x, importance = _skewed(rows=40, cols=768)
    whole = kw.quantize_weighted(x, "Q4_K", importance)
    parts = [
        kw.quantize_weighted(x[a:b], "Q4_K", importance) for a, b in ((0, 7), (7, 40))
    ]
    assert np.array_equal(whole, np.concatenate(parts))
    with pytest.raises(ValueError, match="do not fit"):
        kw.quantize_weighted(x[:, :100], "Q4_K", importance[:100])
    with pytest.raises(ValueError, match="768 columns, the rows 512"):
        kw.quantize_weighted(x[:, :512], "Q4_K", importance)


# --------------------------------------------------------------------------
# calibration and export on a tiny Llama


TEXT = (
    "Move the issue PROJ-7 from To Do to In Progress, then close it. "
    "def add(a, b):\n    return a + b\n"
    "Water boils at 100 degrees Celsius at sea level. "
) * 12


def _outlier_channels(folder: Path) -> Path:
    """Scale the RMSNorm weights per channel (log-normal), so a few input
    columns of every projection carry most of the activation, as in trained
    models; the importance matrix then has something to find."""
    from safetensors.numpy import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(path)
    rng = np.random.default_rng(1)
    for k, v in tensors.items():
        if k.endswith("layernorm.weight"):
            tensors[k] = v * np.exp(rng.normal(0, 1.0, v.shape)).astype(v.dtype)
    save_file(tensors, path, metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imatrix")
    folder = _outlier_channels(
        build_tiny_model(root / "m", "llama", size=(256, 512, 4))
    )
    calibration = root / "calibration.txt"
    calibration.write_text(TEXT, encoding="utf-8")
    return {"folder": folder, "calibration": calibration, "root": root}


def test_collection_follows_llama_cpp_imatrix(tiny) -> None:
    import torch
    import transformers

    steps: list[tuple[int, int]] = []
    im = collect_imatrix(
        tiny["folder"],
        tiny["calibration"],
        lambda d, t, _m: steps.append((d, t)),
        chunk_tokens=64,
    )
    # Every linear layer of the 4 blocks, none of output / token_embd.
    kinds = (
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    )
    assert set(im.weights) == {f"blk.{i}.{k}.weight" for i in range(4) for k in kinds}
    assert im.weights["blk.0.ffn_down.weight"].shape == (512,)
    assert im.weights["blk.2.attn_q.weight"].dtype == np.float32
    assert steps == [(i + 1, im.chunks) for i in range(im.chunks)] and im.chunks > 1
    assert im.summary() == {
        "source": str(tiny["calibration"]),
        "tokens": im.tokens,
        "chunks": im.chunks,
        "tensors": 28,
    }
    # Q, K and V see the same input; its mean square per column is that of
    # the first block's normed embeddings (each chunk starting with BOS).
    assert np.array_equal(
        im.weights["blk.1.attn_q.weight"], im.weights["blk.1.attn_v.weight"]
    )
    tok = transformers.AutoTokenizer.from_pretrained(tiny["folder"])
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny["folder"])
    ids = tok(TEXT, add_special_tokens=False).input_ids
    assert tok("x").input_ids[0] == tok.bos_token_id  # this tokenizer adds BOS
    chunks = [[tok.bos_token_id, *ids[s : s + 63]] for s in range(0, len(ids), 63)]
    assert im.tokens == sum(map(len, chunks)) and im.chunks == len(chunks)
    with torch.no_grad():
        layer = model.model.layers[0]
        x = torch.cat(
            [
                layer.input_layernorm(model.model.embed_tokens(torch.tensor(c)))
                for c in chunks
            ]
        )
    want = (x.double() ** 2).sum(0) / x.shape[0]
    np.testing.assert_allclose(
        im.weights["blk.0.attn_k.weight"], want.numpy(), rtol=1e-5
    )


def test_the_export_uses_it_and_the_logit_error_drops(tiny) -> None:
    from engine.export.logit_check import logit_error

    im = collect_imatrix(tiny["folder"], tiny["calibration"])
    for file_type in ("q4_k_m", "q2_k"):
        plain = tiny["root"] / f"plain-{file_type}.gguf"
        weighted = tiny["root"] / f"imatrix-{file_type}.gguf"
        gx.export_gguf(tiny["folder"], plain, file_type)
        report = gx.export_gguf(tiny["folder"], weighted, file_type, imatrix=im)
        assert report.verified, report.checks
        assert report.imatrix == {**im.summary(), "weighted": 28}
        assert plain.stat().st_size == weighted.stat().st_size
        without = logit_error(tiny["folder"], plain)["mean_abs"]
        report.logit_error = logit_error(tiny["folder"], weighted)
        report.logit_error_without_imatrix = {"mean_abs": without, "max_abs": 1.0}
        assert report.logit_error["mean_abs"] < 0.97 * without, file_type
        summary = report.summary()
        assert (
            f"Importance matrix: {im.tokens} tokens in {im.chunks} chunk(s) of "
            "calibration.txt; 28 tensor(s) quantized with it." in summary
        )
        assert "Without the importance matrix: mean |Δ| " in summary


def test_fallbacks_are_weighted_and_tensors_without_an_entry_unchanged(
    tmp_path: Path,
) -> None:
    # The 64-wide model: every row falls back to a 32-value type, which
    # llama.cpp weights too (Q8_0, the output's, takes no weights).
    folder = build_tiny_model(tmp_path / "m", "llama")
    rng = np.random.default_rng(3)
    skewed = (rng.random(64) ** 4).astype(F)
    im = Imatrix(
        weights={"blk.0.attn_q.weight": skewed, "blk.1.attn_v.weight": skewed},
        source="x.txt",
    )
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    gx.export_gguf(folder, a, "q4_k_m")
    report = gx.export_gguf(folder, b, "q4_k_m", imatrix=im)
    assert report.imatrix["weighted"] == 1  # attn_v of layer 1 is Q8_0
    plain = {t.name: t for t in gguf.GGUFReader(a).tensors}
    weighted = {t.name: t for t in gguf.GGUFReader(b).tensors}
    changed = [
        n
        for n in plain
        if np.asarray(plain[n].data).tobytes() != np.asarray(weighted[n].data).tobytes()
    ]
    assert changed == ["blk.0.attn_q.weight"]
    q = weighted["blk.0.attn_q.weight"]
    assert q.tensor_type == gguf.GGMLQuantizationType.Q5_0
    # An entry of the wrong width is not used.
    wide = build_tiny_model(tmp_path / "w", "llama", size=(256, 512, 2))
    assert gx.export_gguf(wide, b, "q4_k_m", imatrix=im).imatrix["weighted"] == 0


def test_bad_input_is_one_sentence(tiny, tmp_path: Path) -> None:
    from engine.export.jobs import validate_gguf

    folder = str(tiny["folder"])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    blank = tmp_path / "blank.txt"
    blank.write_text("  \n\n ")

    def refused(**config) -> str:
        with pytest.raises(ConfigError) as exc:
            validate_gguf({"model_dir": folder, **config})
        assert exc.value.field == "calibration_text"
        return str(exc.value)

    missing = tmp_path / "nope.txt"
    assert refused(type="q4_k_m", calibration_text=str(missing)) == (
        f"The calibration text {missing} does not exist."
    )
    assert refused(type="q4_k_m", calibration_text=str(empty)) == (
        f"The calibration text {empty} is empty; give a file with text."
    )
    assert refused(type="q8_0", calibration_text=str(tiny["calibration"])) == (
        "An importance matrix weights K-quants only (q2_k, q3_k_s, q3_k_m, q3_k_l, "
        "q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k), not q8_0; choose a K-quant type or "
        "leave the calibration text empty."
    )
    assert refused(
        type="q8_0", adapter=True, calibration_text=str(tiny["calibration"])
    ) == (
        "An importance matrix weights full-model K-quants; a LoRA adapter exports "
        "as f32, f16, bf16, q8_0 without calibration text."
    )
    ok = validate_gguf(
        {
            "model_dir": folder,
            "type": "Q2_K",
            "calibration_text": str(tiny["calibration"]),
        }
    )
    assert ok.calibration_text == str(tiny["calibration"])
    assert (
        validate_gguf({"model_dir": folder, "calibration_text": " "}).calibration_text
        is None
    )
    with pytest.raises(EngineError, match=r"^The calibration text .* is empty; give"):
        read_calibration_text(blank)
    with pytest.raises(EngineError, match="not f16; choose a K-quant type"):
        gx.export_gguf(folder, tmp_path / "x.gguf", "f16", imatrix=Imatrix())
    assert not (tmp_path / "x.gguf").exists()


def test_a_project_dataset_is_calibration_text(tmp_path: Path) -> None:
    folder = tmp_path / "sft"
    folder.mkdir()
    rows = [
        {
            "prompt": [{"role": "user", "content": "Close PROJ-7."}],
            "completion": [{"role": "assistant", "content": "close_issue"}],
        },
        {"prompt": [{"role": "user", "content": "Open PROJ-8."}], "completion": []},
    ]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert read_calibration_text(folder) == (
        "user\nClose PROJ-7.\nassistant\nclose_issue\nuser\nOpen PROJ-8."
    )
    assert read_calibration_text(folder / "train.jsonl", max_chars=9) == "user\nClos"
    (tmp_path / "none").mkdir()
    with pytest.raises(EngineError, match="has no train file"):
        read_calibration_text(tmp_path / "none")


def test_export_gguf_command_and_node_take_calibration_text(
    tiny, tmp_path: Path
) -> None:
    from engine.nodes.registry import get

    out = tmp_path / "cli.gguf"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "export-gguf",
            str(tiny["folder"]),
            "--out",
            str(out),
            "--type",
            "q2_k",
            "--calibration-text",
            str(tiny["calibration"]),
            "--logit-error",
            "--json",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["imatrix"]["weighted"] == 28 and report["imatrix"]["tokens"] > 0
    assert (
        report["logit_error"]["mean_abs"]
        < report["logit_error_without_imatrix"]["mean_abs"]
    )
    assert [p.name for p in tmp_path.iterdir()] == [
        "cli.gguf"
    ]  # the comparison is gone
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "export-gguf",
            str(tiny["folder"]),
            "--out",
            str(out),
            "--type",
            "f16",
            "--calibration-text",
            str(tiny["calibration"]),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "An importance matrix weights K-quants only" in proc.stderr
    spec = {p.name: p for p in get("export.gguf").spec.params}["calibration_text"]
    assert spec.optional and spec.default is None and spec.label == "Calibration text"
    assert "imatrix" in spec.help


def test_the_node_takes_a_linked_dataset_as_calibration(
    tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.export import flow_nodes
    from engine.export.jobs import validate_gguf
    from engine.nodes.base import NodeError, NodeRun

    dataset = tmp_path / "sft"
    dataset.mkdir()
    (dataset / "train.jsonl").write_text(json.dumps({"prompt": "Close PROJ-7."}))
    started: list[dict] = []

    class Started(Exception):
        pass

    def run_job(_node: NodeRun, kind: str, config: dict) -> dict:
        started.append(validate_gguf(config))
        raise Started

    monkeypatch.setattr(flow_nodes, "_run_job", run_job)

    def node(params: dict, **inputs: dict) -> NodeRun:
        return NodeRun(
            node_id="export",
            node_type="export.gguf",
            params={"type": "q4_k_m", "name": "", "calibration_text": None, **params},
            inputs=inputs,
            parent=None,  # type: ignore[arg-type]  # _run_job is replaced
            work_dir=tmp_path,
            on_progress=lambda *_: None,
        )

    model = {"path": str(tiny["folder"]), "name": "tiny"}
    with pytest.raises(Started):
        flow_nodes.export_gguf(
            node({}, model=model, calibration={"path": str(dataset)})
        )
    assert started[-1].calibration_text == str(dataset)
    assert started[-1].type == "q4_k_m"
    with pytest.raises(NodeError, match="not both"):
        flow_nodes.export_gguf(
            node(
                {"calibration_text": str(tiny["calibration"])},
                model=model,
                calibration={"path": str(dataset)},
            )
        )
    with pytest.raises(NodeError, match="weights K-quants only"):
        flow_nodes.export_gguf(
            node({"type": "q8_0", "calibration_text": " x.txt"}, model=model)
        )
    adapter = {"path": str(tmp_path), "base": str(tiny["folder"])}
    with pytest.raises(NodeError, match="a LoRA adapter exports as"):
        flow_nodes.export_gguf(
            node({"type": "q8_0", "calibration_text": "x.txt"}, adapter=adapter)
        )


def test_the_export_job_collects_reports_and_records_it(tiny, tmp_path: Path) -> None:
    from engine.export.jobs import run_gguf, validate_gguf
    from engine.jobs.context import JobContext

    config = validate_gguf(
        {
            "model_dir": str(tiny["folder"]),
            "type": "q4_k_s",
            "calibration_text": str(tiny["calibration"]),
        }
    )
    run_dir = tmp_path / "project" / "runs" / "export"
    run_dir.mkdir(parents=True)
    ctx = JobContext("export", run_dir, "export.gguf", as_dict(config), events=None)
    seen: list[str] = []
    ctx.progress = lambda _d, _t, message="": seen.append(message)  # type: ignore[method-assign]
    try:
        summary = run_gguf(ctx, config)
    finally:
        ctx.close()
    report = summary["report"]
    assert report["imatrix"]["weighted"] == 28 and report["file_type"] == "q4_k_s"
    (model,) = summary["models"]
    assert model["metrics"]["imatrix_tokens"] == report["imatrix"]["tokens"] > 0
    chunks = report["imatrix"]["chunks"]
    assert [m for m in seen if m.startswith("importance")] == [
        f"importance matrix: chunk {i + 1}" for i in range(chunks)
    ]
    assert seen[-1] == "done" and Path(model["file"]).is_file()


def test_export_ollama_command_takes_calibration_text(tiny, tmp_path: Path) -> None:
    """The one-click export (headless) weights its K-quant GGUF by the
    calibration text, a setting derived from the Export GGUF declaration;
    types without K-quants made here, and a GGUF deployed as it is, refuse
    it in one sentence."""
    from models_workspace_support import FakeOllama

    from engine.export.jobs import GGUFExportConfig
    from engine.export.ollama_job import OllamaExportConfig
    from engine.settings import fields_of

    ours = fields_of(OllamaExportConfig)["calibration_text"]
    declared = fields_of(GGUFExportConfig)["calibration_text"]
    assert (ours.default, ours.label, ours.help) == (
        declared.default,
        declared.label,
        declared.help,
    )
    assert "imatrix" in ours.help

    def export(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engine", "export-ollama", *args, "--quiet"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )

    calibration = str(tiny["calibration"])
    with FakeOllama() as fake:
        proc = export(
            str(tiny["folder"]),
            *("--name", "tiny-agent", "--host", fake.host, "--type", "Q4_K_S"),
            *("--calibration-text", calibration, "--out", str(tmp_path / "out")),
            "--json",
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "tiny-agent:latest" in fake.models
    result = json.loads(proc.stdout)
    gguf_entry = next(m for m in result["models"] if m["kind"] == "gguf")
    assert gguf_entry["metrics"]["type"] == "q4_k_s"
    assert gguf_entry["metrics"]["imatrix_tokens"] > 0

    for args, sentence in (
        (
            (str(tiny["folder"]), "--type", "ollama-q4_k_m"),
            "An importance matrix weights K-quants only (",
        ),
        (
            (gguf_entry["file"], "--type", "q4_k_s"),
            "A .gguf file is deployed as it is; calibration text weights an "
            "export from a model or adapter.",
        ),
    ):
        proc = export(*args, "--name", "x", "--calibration-text", calibration, "--json")
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and sentence in proc.stderr
