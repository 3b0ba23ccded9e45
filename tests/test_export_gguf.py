"""HF -> GGUF export: logits through transformers' GGUF loader for every type,
tokenizer round trip, LoRA adapters against the merged model, bad input."""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_tiny_model

from engine.errors import EngineError
from engine.export import gguf as gx
from engine.export.types import K_FILE_TYPES

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

TEXT = "Move PROJ-7 from To Do to In Progress with transition_issue."

# Max |logit| error vs the source (logits span about +-2.5 here); FACTS: ~0 for
# F32/F16/BF16, ~0.05 Q8_0, ~0.8 Q4_0. Bounds with margin, plus a correlation
# floor so a broken export cannot pass on small logits.
TOLERANCE = {
    "f32": 1e-4,
    "f16": 0.02,
    "bf16": 0.08,
    "q8_0": 0.2,
    "q5_0": 1.0,
    "q5_1": 1.0,
    "q4_0": 2.0,
    "q4_1": 2.0,
}
MIN_CORR = {"q4_0": 0.9, "q4_1": 0.9, "q5_0": 0.95, "q5_1": 0.95}

_SOURCES: dict[tuple[str, bool], tuple[Path, object, object]] = {}


def _source(tmp_root: Path, arch: str, tie: bool):
    key = (arch, tie)
    if key not in _SOURCES:
        folder = build_tiny_model(tmp_root / f"{arch}-{tie}", arch, tie)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        _SOURCES[key] = (folder, model, tok)
    return _SOURCES[key]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    transformers.logging.set_verbosity_error()
    return tmp_path_factory.mktemp("gguf")


def _load_gguf(path: Path, src_model):
    kwargs = {}
    if src_model.config.model_type == "qwen3":
        kwargs["config"] = src_model.config  # separate head_dim (FACTS)
    return transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, **kwargs
    ).eval()


# Every type on Llama (the permuted architecture); a spread on the others.
# K-quant mixes: tests/test_export_kquants.py (rows here are 64 wide).
CASES = [("llama", False, q) for q in gx.GGUF_TYPES if q not in K_FILE_TYPES]
CASES += [("qwen2", True, q) for q in ("f32", "f16", "q8_0", "q4_0")]
CASES += [("qwen3", False, q) for q in ("f32", "bf16", "q8_0", "q4_1", "q5_0")]
CASES += [("llama", True, "q5_1"), ("qwen2", False, "f16"), ("qwen3", True, "q8_0")]


@pytest.mark.parametrize(("arch", "tie", "qtype"), CASES)
def test_export_logits_match(root: Path, arch: str, tie: bool, qtype: str) -> None:
    folder, model, tok = _source(root, arch, tie)
    out = root / f"{arch}-{tie}-{qtype}.gguf"
    seen: list[tuple[int, int]] = []
    report = gx.export_gguf(folder, out, qtype, lambda d, t, m: seen.append((d, t)))
    assert report.verified, report.checks
    assert seen and seen[-1][0] == seen[-1][1]
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(seen))
    names = {t.name for t in gguf.GGUFReader(out).tensors}
    assert ("output.weight" in names) is (not tie)
    ids = tok(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model(ids).logits
        got = _load_gguf(out, model)(ids).logits
    err = (got - ref).abs().max().item()
    assert err <= TOLERANCE[qtype], f"{arch} {qtype}: max |logit error| {err:.4f}"
    corr = np.corrcoef(got.flatten().numpy(), ref.flatten().numpy())[0, 1]
    assert corr >= MIN_CORR.get(qtype, 0.99)


def test_metadata_and_tokenizer_round_trip(root: Path) -> None:
    for arch, tie, pre in [("llama", False, "llama-bpe"), ("qwen3", False, "qwen2")]:
        folder, model, tok = _source(root, arch, tie)
        out = root / f"meta-{arch}.gguf"
        report = gx.export_gguf(folder, out, "f16")
        assert report.tokenizer_pre == pre and not report.warnings
        reader = gguf.GGUFReader(out)
        f = reader.fields
        assert f["tokenizer.ggml.model"].contents() == "gpt2"
        assert f["tokenizer.ggml.pre"].contents() == pre
        tokens = f["tokenizer.ggml.tokens"].contents()
        assert len(tokens) == model.config.vocab_size > len(tok)
        assert tokens[-1] == f"[PAD{len(tokens) - 1}]"
        assert f["tokenizer.ggml.add_bos_token"].contents() is (arch == "llama")
        assert "<|" in f["tokenizer.chat_template"].contents()
        theta = model.config.rope_parameters["rope_theta"]
        assert f[f"{arch}.rope.freq_base"].contents() == pytest.approx(theta)
        if arch == "qwen3":
            assert f["qwen3.attention.key_length"].contents() == 32
        eos = f["tokenizer.ggml.eos_token_id"].contents()
        assert tokens[eos] == tok.eos_token
        gtok = transformers.AutoTokenizer.from_pretrained(
            out.parent, gguf_file=out.name
        )
        assert gtok(TEXT).input_ids == tok(TEXT).input_ids


def test_unknown_pre_tokenizer_falls_back_with_warning(root: Path, tmp_path) -> None:
    folder = build_tiny_model(tmp_path / "m", "qwen2")
    tj = json.loads((folder / "tokenizer.json").read_text())
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\w+"
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    report = gx.export_gguf(folder, tmp_path / "x.gguf", "f32")
    assert report.tokenizer_pre == "default"
    assert any("pre-tokenizer" in w for w in report.warnings)


def test_unsupported_architecture_refused_before_writing(tmp_path: Path) -> None:
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})
    )
    out = tmp_path / "out" / "gpt2.gguf"
    with pytest.raises(EngineError) as exc:
        gx.export_gguf(folder, out, "f16")
    msg = str(exc.value)
    assert "GPT2LMHeadModel" in msg and "Qwen2ForCausalLM" in msg
    assert "LlamaForCausalLM" in msg and msg.count(".") >= 1
    assert not (tmp_path / "out").exists()


def test_missing_folder_and_config(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        gx.export_gguf(tmp_path / "nope", tmp_path / "a.gguf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EngineError, match=r"has no config\.json"):
        gx.export_gguf(tmp_path / "empty", tmp_path / "a.gguf")
    with pytest.raises(EngineError, match="Unknown GGUF type"):
        gx.export_gguf(tmp_path / "empty", tmp_path / "a.gguf", "q4_k_x")
    assert list(tmp_path.glob("*.gguf")) == []


def test_corrupt_safetensors(tmp_path: Path) -> None:
    folder = build_tiny_model(tmp_path / "m", "qwen2")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # truncated download
    with pytest.raises(EngineError, match="not a valid safetensors file"):
        gx.export_gguf(folder, tmp_path / "out.gguf")
    weights.write_bytes(b"\x00" * 64)
    with pytest.raises(EngineError, match="not a valid safetensors file"):
        gx.export_gguf(folder, tmp_path / "out.gguf")
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_integer_weights_refused_before_writing(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    folder = build_tiny_model(tmp_path / "m", "qwen2")
    weights = load_file(folder / "model.safetensors")
    name = "model.layers.0.mlp.up_proj.weight"
    weights[name] = (weights[name] * 100).astype(np.int8)  # a quantized export
    save_file(weights, folder / "model.safetensors")
    out_dir = tmp_path / "out"
    with pytest.raises(EngineError) as exc:
        gx.export_gguf(folder, out_dir / "a.gguf", "q8_0")
    assert str(exc.value) == (
        f"Tensor {name} in model.safetensors is I8, which cannot be exported; "
        "export from a float32, float16 or bfloat16 checkpoint."
    )
    assert not out_dir.exists()


def test_full_disk_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    folder = build_tiny_model(tmp_path / "m", "qwen2")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    # Too little space known in advance: refused before writing.
    real = shutil.disk_usage
    monkeypatch.setattr(
        gx.shutil, "disk_usage", lambda p: real(p)._replace(free=1024 * 1024)
    )
    with pytest.raises(EngineError, match="Not enough disk space"):
        gx.export_gguf(folder, out_dir / "a.gguf")
    monkeypatch.setattr(gx.shutil, "disk_usage", real)

    # The disk fills up mid-write (ENOSPC from the OS).
    def progress(done: int, total: int, message: str) -> None:
        if done > total // 2:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(EngineError, match=r"disk .* is full"):
        gx.export_gguf(folder, out_dir / "a.gguf", "f16", progress)
    assert list(out_dir.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_full_disk_reported_by_the_os_leaves_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    folder = build_tiny_model(tmp_path / "m", "qwen2")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    temp_files: list[Path] = []
    real = gguf.GGUFWriter.write_ti_data_to_file

    def then_the_disk_fills(self) -> None:
        real(self)
        # From here on the kernel answers every write to the temporary file
        # with ENOSPC, as a full disk does: /dev/full takes over its fd.
        fout = self.fout[0]
        temp_files.append(Path(fout.name))
        full = os.open("/dev/full", os.O_WRONLY)
        try:
            os.dup2(full, fout.fileno())
        finally:
            os.close(full)

    monkeypatch.setattr(gguf.GGUFWriter, "write_ti_data_to_file", then_the_disk_fills)
    with pytest.raises(EngineError) as exc:
        gx.export_gguf(folder, out_dir / "a.gguf", "f16")
    assert re.fullmatch(
        rf"The disk holding {re.escape(str(out_dir))} is full; free about \d+ MB "
        r"and export again\.",
        str(exc.value),
    ), str(exc.value)
    assert temp_files and temp_files[0].parent == out_dir  # it was on disk
    assert list(out_dir.iterdir()) == []


def test_overwrite_is_atomic(root: Path) -> None:
    folder, _, _ = _source(root, "qwen2", True)
    out = root / "atomic.gguf"
    out.write_bytes(b"old")
    gx.export_gguf(folder, out, "q8_0")
    assert out.read_bytes()[:4] == b"GGUF"
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]


def test_pre_tokenizer_hashes_are_distinct() -> None:
    assert set(gx.KNOWN_PRE_TOKENIZERS.values()) >= {"qwen2", "llama-bpe", "smollm"}
    assert len(gx.KNOWN_PRE_TOKENIZERS) == 4


# ---------------------------------------------------------------- LoRA


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lora_adapter_matches_merged_model(root: Path, arch: str) -> None:
    peft = pytest.importorskip("peft")
    folder, base, tok = _source(root, arch, False)
    base_copy = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    cfg = peft.LoraConfig(
        r=8,
        lora_alpha=16,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"],
        lora_dropout=0.0,
        init_lora_weights=False,  # random B, so the adapter changes the output
    )
    torch.manual_seed(1)
    pm = peft.get_peft_model(base_copy, cfg)
    adapter_dir = root / f"adapter-{arch}"
    pm.save_pretrained(adapter_dir)
    out = root / f"adapter-{arch}.gguf"
    report = gx.export_lora_gguf(adapter_dir, out, "f32", base_model_dir=folder)
    assert report.verified and report.kind == "adapter"

    reader = gguf.GGUFReader(out)
    f = reader.fields
    assert f["general.type"].contents() == "adapter"
    assert f["adapter.type"].contents() == "lora"
    assert f["adapter.lora.alpha"].contents() == pytest.approx(16.0)
    assert f["general.architecture"].contents() == arch
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    assert len(tensors) == 2 * 5 * 2
    assert tensors["blk.0.attn_q.weight.lora_a"].shape == (8, 64)

    # Apply the GGUF adapter to the base weights (undoing the Llama Q/K
    # permutation) and compare logits with PEFT's merged model.
    name_map = gguf.get_tensor_name_map(
        {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}[arch], 2
    )
    patched = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    cfgm = patched.config
    state = patched.state_dict()
    applied = 0
    for hf_name in list(state):
        g = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if g is None or f"{g}.lora_a" not in tensors:
            continue
        delta = tensors[f"{g}.lora_b"] @ tensors[f"{g}.lora_a"] * (16.0 / 8)
        if arch == "llama" and ("q_proj" in hf_name or "k_proj" in hf_name):
            n = (
                cfgm.num_attention_heads
                if "q_proj" in hf_name
                else cfgm.num_key_value_heads
            )
            # inverse of the GGML permutation
            delta = (
                delta.reshape(n, delta.shape[0] // n // 2, 2, *delta.shape[1:])
                .swapaxes(1, 2)
                .reshape(delta.shape)
            )
        state[hf_name] = state[hf_name] + torch.from_numpy(delta)
        applied += 1
    assert applied == 2 * 5
    patched.load_state_dict(state)
    merged = pm.merge_and_unload().eval()
    ids = tok(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        want = merged(ids).logits
        got = patched(ids).logits
        plain = base(ids).logits
    assert (want - plain).abs().max().item() > 0.05  # the adapter matters
    assert (got - want).abs().max().item() < 1e-4


def test_lora_bad_input(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        gx.export_lora_gguf(tmp_path / "nope", tmp_path / "a.gguf")
    (tmp_path / "ad").mkdir()
    with pytest.raises(EngineError, match=r"no adapter_config\.json"):
        gx.export_lora_gguf(tmp_path / "ad", tmp_path / "a.gguf")
    with pytest.raises(EngineError, match="rank-sized rows do not fit 4/5-bit"):
        gx.export_lora_gguf(tmp_path / "ad", tmp_path / "a.gguf", "q4_0")
    with pytest.raises(EngineError, match="not q9_9; that is no GGUF type"):
        gx.export_lora_gguf(tmp_path / "ad", tmp_path / "a.gguf", "q9_9")
    # A LoRA whose weights file was cut short.
    base = build_tiny_model(tmp_path / "base", "qwen2")
    (tmp_path / "ad" / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": 4, "base_model_name_or_path": str(base)})
    )
    (tmp_path / "ad" / "adapter_model.safetensors").write_bytes(b"\xff" * 40)
    with pytest.raises(EngineError, match="is not a valid safetensors file"):
        gx.export_lora_gguf(tmp_path / "ad", tmp_path / "a.gguf")
    assert list(tmp_path.glob("*.gguf")) == list(tmp_path.glob(".*")) == []
