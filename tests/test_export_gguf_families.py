"""GGUF export of the tokenizer and rope families beyond the byte-level BPE
Llama 3 / Qwen ones in test_export_gguf.py, each built here as a tiny model:

- Llama 2 / Mistral style SentencePiece BPE with byte fallback: a real
  ``tokenizer.model`` protobuf (written with Google's protobuf runtime through
  transformers' generated ``sentencepiece_model_pb2``; the sentencepiece
  package itself is not installed), a Llama-2-style ``tokenizer.json``, or both
  as real checkpoints ship them. llama.cpp tokenizer model ``llama``.
- SmolLM style: Llama architecture, tied embeddings, GPT-2 style byte-level
  BPE with single-digit splitting (llama.cpp pre-tokenizer ``smollm``).
- Llama 3.1 rope scaling (``rope_type`` ``llama3`` in transformers 5's
  ``rope_parameters``): the ``rope_freqs`` factors land in the file and give
  the source logits once applied the way llama.cpp applies them; linear
  scaling likewise; Qwen2 YaRN keys (keys only).
- A SentencePiece BPE tokenizer.json without byte fallback, and a Unigram
  tokenizer.json without its tokenizer.model (refused in one sentence).

Logits and tokenization are checked through transformers' GGUF loader, whose
"llama" tokenizer rebuilds BPE merges from the scores as llama.cpp's
SentencePiece tokenizer does; neither sentencepiece nor llama.cpp itself runs
here.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import CHATML_TEMPLATE, SENTENCES, build_tiny_model

from engine.errors import EngineError
from engine.export import gguf as gx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

# "ü" and "ß" never occur in SENTENCES: the SentencePiece vocabulary has to
# fall back to byte tokens for them.
TEXTS = [
    "Move the issue from To Do to In Progress with transition_issue.",
    "Grüße: the ticket is Done after review.",
    "  Two leading spaces, then add_comment writes a comment on the ticket.",
]
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{i:02X}>" for i in range(256)]
LLAMA2_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
    "{% else %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}"
)


@pytest.fixture(scope="module", autouse=True)
def _quiet() -> None:
    transformers.logging.set_verbosity_error()


# ------------------------------------------------------------ tiny models


def _tiny_llama(folder: Path, seed: int = 0, mistral: bool = False, **config):
    """A 2-layer, 64-wide LlamaForCausalLM (or MistralForCausalLM) with
    visibly non-zero weights, saved to ``folder``; returns the model."""
    base = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
    )
    base.update(config)
    torch.manual_seed(seed)
    if mistral:
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**base))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**base))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    return model


def _spm_vocab() -> tuple[list[tuple[str, float, int]], list[tuple[str, str]]]:
    """A SentencePiece-BPE vocabulary in Llama 2's layout: ``<unk>``, ``<s>``,
    ``</s>``, the 256 byte tokens, merged pieces best first, then single
    characters; scores fall with rank as in SentencePiece BPE models.
    Returns ((piece, score, sentencepiece type), merges)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # SentencePiece splits on whitespace and marks a word start with U+2581.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="always", split=True
    )
    trainer = trainers.BpeTrainer(
        vocab_size=400, min_frequency=2, show_progress=False, special_tokens=[]
    )
    tok.train_from_iterator(SENTENCES * 2, trainer=trainer)
    trained = json.loads(tok.to_str())["model"]
    merges = [(a, b) for a, b in trained["merges"]]
    merged = [a + b for a, b in merges]
    chars = sorted(t for t in trained["vocab"] if t not in set(merged))
    pieces: list[tuple[str, float, int]] = [("<unk>", 0.0, 2)]
    pieces += [(s, 0.0, 3) for s in SPM_SPECIALS[1:]]
    pieces += [(b, 0.0, 6) for b in BYTE_TOKENS]
    pieces += [(p, -float(r), 1) for r, p in enumerate(merged)]
    pieces += [(c, -float(len(merged) + i), 1) for i, c in enumerate(chars)]
    return pieces, merges


def _write_sentencepiece_model(path: Path, pieces: list[tuple[str, float, int]]):
    """A ``tokenizer.model`` (SentencePiece ModelProto, BPE, byte fallback,
    dummy prefix) serialized by Google's protobuf runtime."""
    from transformers.convert_slow_tokenizer import import_protobuf

    pb = import_protobuf()
    proto = pb.ModelProto()
    for piece, score, kind in pieces:
        p = proto.pieces.add()
        p.piece, p.score, p.type = piece, score, kind
    spec = proto.trainer_spec
    spec.model_type = pb.TrainerSpec.BPE
    spec.vocab_size = len(pieces)
    spec.byte_fallback = True
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = 0, 1, 2, -1
    norm = proto.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = True
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    path.write_bytes(proto.SerializeToString())


def _llama2_tokenizer(pieces, merges):
    """The ``tokenizer.json`` tokenizer transformers makes of a Llama 2
    SentencePiece model: BPE with byte fallback, ``▁`` prefix, BOS added."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )

    vocab = {p: i for i, (p, _s, _t) in enumerate(pieces)}
    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            unk_token="<unk>",
            byte_fallback=True,
            fuse_unk=True,
        )
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="first", split=False
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(content=" ", left=1),
        ]
    )
    tok.add_special_tokens([AddedToken(s, special=True) for s in SPM_SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        chat_template=LLAMA2_TEMPLATE,
    )


_SPM: dict[str, tuple[Path, object, object]] = {}


def _spm_source(root: Path, files: str):
    """A Llama 2 style folder; ``files`` is ``model`` (tokenizer.model only),
    ``json`` (tokenizer.json only) or ``both`` (as Llama 2 and Mistral ship;
    this one is a MistralForCausalLM). Returns (folder, model, reference
    tokenizer)."""
    if files not in _SPM:
        pieces, merges = _spm_vocab()
        folder = root / f"llama2-spm-{files}"
        model = _tiny_llama(
            folder,
            seed=3,
            mistral=files == "both",
            vocab_size=len(pieces),
            bos_token_id=1,
            eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
        ref = _llama2_tokenizer(pieces, merges)
        ref.save_pretrained(folder)
        if files == "model":
            (folder / "tokenizer.json").unlink()
        if files in ("model", "both"):
            _write_sentencepiece_model(folder / "tokenizer.model", pieces)
        _SPM[files] = (folder, model, ref)
    return _SPM[files]


def _smollm_source(folder: Path):
    """SmolLM2-Instruct in small: Llama architecture, tied embeddings, byte
    level BPE after single-digit splitting, ChatML specials at ids 0-2."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(
                add_prefix_space=False, trim_offsets=True, use_regex=True
            ),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        min_frequency=2,
        show_progress=False,
        special_tokens=specials,  # ids 0-2, inside the BPE vocabulary
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 2, trainer=trainer)
    ref = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    )
    model = _tiny_llama(
        folder,
        seed=5,
        vocab_size=len(ref),
        num_key_value_heads=1,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    )
    ref.save_pretrained(folder)
    return model, ref


def _load(path: Path, **kwargs: object):
    return transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, **kwargs
    ).eval()


def _gguf_tokenizer(path: Path):
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def _max_logit_error(model, loaded, ids) -> float:
    with torch.no_grad():
        return (loaded(ids).logits - model(ids).logits).abs().max().item()


# ------------------------------------------------------------ SentencePiece


@pytest.mark.parametrize("files", ["model", "json", "both"])
def test_sentencepiece_llama_vocab(tmp_path_factory, files: str) -> None:
    root = tmp_path_factory.getbasetemp() / "spm"
    folder, model, ref = _spm_source(root, files)
    arch = json.loads((folder / "config.json").read_text())["architectures"][0]
    assert arch == ("MistralForCausalLM" if files == "both" else "LlamaForCausalLM")
    out = folder.parent / f"llama2-{files}.gguf"
    report = gx.export_gguf(folder, out, "f16")
    assert report.verified, report.checks
    assert report.tokenizer_model == "llama" and report.tokenizer_pre == ""
    assert not report.warnings, report.warnings

    f = gguf.GGUFReader(out).fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    scores = f["tokenizer.ggml.scores"].contents()
    pieces, _ = _spm_vocab()
    assert tokens == [p for p, _s, _t in pieces]
    T = gguf.TokenType
    assert types[:3] == [T.UNKNOWN, T.CONTROL, T.CONTROL]
    assert set(types[3:259]) == {T.BYTE} and set(types[259:]) == {T.NORMAL}
    # Merge priority lives in the scores: they must fall with rank. With a
    # tokenizer.model they are its own (as llama.cpp's converter takes them),
    # from tokenizer.json alone they are minus the token id.
    assert all(a > b for a, b in itertools.pairwise(scores[259:]))
    if files == "json":
        assert scores[259:] == [-float(i) for i in range(259, len(tokens))]
    else:
        assert scores == [s for _p, s, _t in pieces]
    assert "tokenizer.ggml.merges" not in f
    assert f["tokenizer.ggml.model"].contents() == "llama"
    assert f["tokenizer.ggml.add_bos_token"].contents() is True
    assert f["tokenizer.ggml.bos_token_id"].contents() == 1
    assert f["tokenizer.ggml.eos_token_id"].contents() == 2
    assert f["tokenizer.ggml.unknown_token_id"].contents() == 0
    assert "[INST]" in f["tokenizer.chat_template"].contents()

    gtok = _gguf_tokenizer(out)
    for text in TEXTS:
        want = ref(text).input_ids
        assert gtok(text).input_ids == want, text
        assert want[0] == 1
    assert any(
        t.startswith("<0x") for t in ref.convert_ids_to_tokens(ref(TEXTS[1]).input_ids)
    )
    ids = ref(TEXTS[0], return_tensors="pt").input_ids
    assert _max_logit_error(model, _load(out), ids) < 0.02


def test_sentencepiece_bpe_without_byte_fallback(tmp_path_factory, tmp_path) -> None:
    """Some conversions of SentencePiece BPE have no byte fallback: the ▁
    marks (Metaspace) still make it a llama vocabulary, not a GPT-2 one."""
    folder, _model, ref = _spm_source(tmp_path_factory.getbasetemp() / "spm", "json")
    copy = tmp_path / "no-fallback"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    tj = json.loads((copy / "tokenizer.json").read_text())
    assert tj["model"]["byte_fallback"] is True
    tj["model"]["byte_fallback"] = False
    (copy / "tokenizer.json").write_text(json.dumps(tj))
    out = tmp_path / "nf.gguf"
    report = gx.export_gguf(copy, out, "f16")
    assert report.tokenizer_model == "llama" and not report.warnings
    gtok = _gguf_tokenizer(out)
    for text in (TEXTS[0], TEXTS[2]):  # no characters outside the vocabulary
        assert gtok(text).input_ids == ref(text).input_ids, text


def test_unigram_tokenizer_json_alone_is_refused_before_writing(
    tmp_path_factory, tmp_path: Path
) -> None:
    """A Unigram tokenizer.json (T5/ALBERT style) without its tokenizer.model
    is refused in one sentence; with the SentencePiece model it exports."""
    from tokenizers import Tokenizer, models

    folder, _model, _ref = _spm_source(tmp_path_factory.getbasetemp() / "spm", "json")
    pieces, _ = _spm_vocab()
    uni = Tokenizer(models.Unigram([(p, s) for p, s, _t in pieces], 0, False))
    copy = tmp_path / "unigram"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    uni.save(str(copy / "tokenizer.json"))
    with pytest.raises(EngineError) as exc:
        gx.export_gguf(copy, tmp_path / "out" / "u.gguf")
    assert str(exc.value) == (
        f"The tokenizer.json in {copy} holds a Unigram model, which only a "
        "SentencePiece tokenizer.model can describe to llama.cpp; put the model's "
        "tokenizer.model beside it."
    )
    assert not (tmp_path / "out").exists()
    _write_sentencepiece_model(copy / "tokenizer.model", pieces)
    report = gx.export_gguf(copy, tmp_path / "out" / "u.gguf", "f32")
    assert report.verified and report.tokenizer_model == "llama"


def test_sentencepiece_model_file_parser_reads_protobuf(tmp_path: Path) -> None:
    """The exporter's own protobuf reader against Google's serializer, scores
    and types included (negative scores, the 256 byte pieces)."""
    pieces, _ = _spm_vocab()
    path = tmp_path / "tokenizer.model"
    _write_sentencepiece_model(path, pieces)
    got = gx._read_sentencepiece_model(path)
    assert [(p, t) for p, _s, t in got] == [(p, t) for p, _s, t in pieces]
    assert np.allclose([s for _p, s, _t in got], [s for _p, s, _t in pieces])


# ------------------------------------------------------------ SmolLM


def test_smollm_style_tied_llama_with_digit_split_bpe(tmp_path: Path) -> None:
    folder = tmp_path / "smollm"
    model, ref = _smollm_source(folder)
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"]
    for qtype, tol in (("f32", 1e-4), ("q8_0", 0.2)):
        out = tmp_path / f"smollm-{qtype}.gguf"
        report = gx.export_gguf(folder, out, qtype)
        assert report.verified and not report.warnings, report.warnings
        assert report.tokenizer_model == "gpt2" and report.tokenizer_pre == "smollm"
        reader = gguf.GGUFReader(out)
        names = {t.name for t in reader.tensors}
        assert "output.weight" not in names and "token_embd.weight" in names
        f = reader.fields
        assert f["tokenizer.ggml.pre"].contents() == "smollm"
        tokens = f["tokenizer.ggml.tokens"].contents()
        assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        assert f["tokenizer.ggml.token_type"].contents()[:3] == [3, 3, 3]
        assert f["tokenizer.ggml.add_bos_token"].contents() is False
        assert f["tokenizer.ggml.eos_token_id"].contents() == 2
        assert f["llama.rope.freq_base"].contents() == pytest.approx(100000.0)
        assert f["llama.attention.head_count_kv"].contents() == 1
        ids = ref(TEXTS[0], return_tensors="pt").input_ids
        assert _max_logit_error(model, _load(out), ids) <= tol
    # transformers' GGUF loader has no split rule for "smollm" and falls back
    # to GPT-2's, which keeps digit runs whole; text without numbers splits
    # the same either way (llama.cpp's smollm rule splits digits one by one).
    gtok = _gguf_tokenizer(tmp_path / "smollm-f32.gguf")
    for text in TEXTS:
        assert gtok(text).input_ids == ref(text).input_ids, text
    assert ref.tokenize("2026") == ["2", "0", "2", "6"]


# ------------------------------------------------------------ Llama 3 rope


def test_llama3_rope_scaling(tmp_path: Path) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    # A short original context makes every branch of the llama3 rule occur
    # at head_dim 16 (kept, smoothed and scaled frequencies) and the scaled
    # ones turn far enough over a few dozen tokens to change the logits.
    rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    # The tiny Llama 3 folder's tokenizer, new weights; ids chosen directly.
    folder = build_tiny_model(tmp_path / "llama31", "llama")
    n_vocab = len(transformers.AutoTokenizer.from_pretrained(folder))
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    model = _tiny_llama(
        folder,
        seed=7,
        vocab_size=n_vocab,
        max_position_embeddings=1024,
        rope_parameters=rope,
    )
    out = tmp_path / "llama31.gguf"
    report = gx.export_gguf(folder, out, "f32")
    assert report.verified, report.checks

    reader = gguf.GGUFReader(out)
    f = reader.fields
    assert f["llama.rope.freq_base"].contents() == pytest.approx(10000.0)
    assert f["llama.rope.dimension_count"].contents() == 16
    assert f["llama.context_length"].contents() == 1024
    assert "llama.rope.scaling.type" not in f  # llama.cpp reads rope_freqs
    factors = {t.name: np.array(t.data) for t in reader.tensors}["rope_freqs.weight"]
    # What transformers computes for the same config: default / llama3.
    inv_llama3, scale = ROPE_INIT_FUNCTIONS["llama3"](model.config, "cpu")
    assert scale == 1.0
    dim = 16
    inv_default = 1.0 / (10000.0 ** (torch.arange(0, dim, 2).float() / dim))
    want = (inv_default / inv_llama3).numpy()
    assert np.allclose(factors, want, rtol=1e-5)
    assert factors[0] == 1.0 and factors[-1] == 8.0
    assert any(1.0 < x < 8.0 for x in factors)

    # llama.cpp divides each rotary frequency by its factor. The GGUF loader
    # rebuilds a default-rope config, so apply the file's factors the same way
    # and compare with the source model over 60 positions.
    ids = torch.tensor([[(7 * i + 3) % (n_vocab - 10) + 5 for i in range(60)]])
    loaded = _load(out)
    plain_err = _max_logit_error(model, loaded, ids)
    rotary = loaded.model.rotary_emb
    base_inv = 1.0 / (
        f["llama.rope.freq_base"].contents() ** (torch.arange(0, dim, 2).float() / dim)
    )
    rotary.inv_freq.copy_(base_inv / torch.from_numpy(factors))
    err = _max_logit_error(model, loaded, ids)
    assert plain_err > 0.05, "the rope factors must matter for this test"
    assert err < 1e-4, err


def test_linear_rope_scaling(tmp_path: Path) -> None:
    """Linear position interpolation: scaling type and factor as keys, which
    llama.cpp applies by dividing every position (every frequency) by it."""
    folder = build_tiny_model(tmp_path / "linear", "llama")
    n_vocab = len(transformers.AutoTokenizer.from_pretrained(folder))
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    rope = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}
    model = _tiny_llama(folder, seed=8, vocab_size=n_vocab, rope_parameters=rope)
    out = tmp_path / "linear.gguf"
    assert gx.export_gguf(folder, out, "f32").verified
    reader = gguf.GGUFReader(out)
    f = reader.fields
    assert f["llama.rope.scaling.type"].contents() == "linear"
    assert f["llama.rope.scaling.factor"].contents() == pytest.approx(4.0)
    assert "rope_freqs.weight" not in {t.name for t in reader.tensors}

    ids = torch.tensor([[(5 * i + 1) % (n_vocab - 10) + 5 for i in range(60)]])
    loaded = _load(out)
    plain_err = _max_logit_error(model, loaded, ids)
    rotary = loaded.model.rotary_emb
    rotary.inv_freq.copy_(rotary.inv_freq / f["llama.rope.scaling.factor"].contents())
    err = _max_logit_error(model, loaded, ids)
    assert plain_err > 0.05, "the scaling must matter for this test"
    assert err < 1e-4, err


def test_qwen2_yarn_keys_from_rope_parameters(tmp_path: Path) -> None:
    """Qwen2.5's long-context YaRN settings, as transformers 5 saves them
    (``rope_parameters``), become llama.cpp's scaling keys. Only the keys are
    checked: transformers' GGUF loader ignores them, and llama.cpp's YaRN is
    not re-implemented here."""
    folder = build_tiny_model(tmp_path / "yarn", "qwen2")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("rope_scaling", None)
    cfg["rope_parameters"] = {
        "rope_type": "yarn",
        "rope_theta": 1000000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "yarn.gguf"
    assert gx.export_gguf(folder, out, "f16").verified
    f = gguf.GGUFReader(out).fields
    assert f["qwen2.rope.freq_base"].contents() == pytest.approx(1e6)
    assert f["qwen2.rope.scaling.type"].contents() == "yarn"
    assert f["qwen2.rope.scaling.factor"].contents() == pytest.approx(4.0)
    assert f["qwen2.rope.scaling.original_context_length"].contents() == 32768
