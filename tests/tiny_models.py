"""Tiny, real Hugging Face causal-LM folders built offline for tests.

``build_tiny_model`` trains a byte-level BPE tokenizer with ``tokenizers`` on a
few dozen sentences about tools and Jira statuses, wraps it as a
``PreTrainedTokenizerFast`` with the architecture's special tokens and chat
template, and saves a 2-layer, 64-wide ``LlamaForCausalLM`` /
``Qwen2ForCausalLM`` / ``Qwen3ForCausalLM`` with seeded random weights
(safetensors). The pre-tokenizer copies the real model family's (Qwen2 or
Llama 3 split regex, then byte-level), so exporters see what they would see on
a real checkpoint.

Folders are cached per ``(arch, tie_embeddings, seed)`` for the test session
under one temporary directory (removed when the process exits) and copied to
the requested ``folder``. Plain functions, no pytest fixtures.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

ARCHES = ("llama", "qwen2", "qwen3")
TINY_TRAIN = {
    "max_steps": 1,
    "batch_size": 2,
    "num_generations": 2,
    "max_length": 512,
    "max_completion_length": 4,
    "lora_rank": 4,
    "save_steps": 0,
    "seed": 0,
    "precision": "fp32",
    "device": "cpu",
    "gradient_checkpointing": False,
    "eval_every_steps": 0,
}
"""llm.train settings for one quick CPU step of a tiny model (not
validated: the tests of validation turn it on)."""

SENTENCES = [
    "Move the issue from To Do to In Progress.",
    "The ticket is Done after review.",
    "Call the tool transition_issue with the issue key and the new status.",
    "Use search_issues to find every issue in To Do.",
    "Tools: get_issue, search_issues, transition_issue, add_comment, assign_issue.",
    "The agent picks one tool per step and reads the observation.",
    "In Progress means somebody is working on it.",
    "Done is a terminal status; the episode ends there.",
    "An invalid tool gives a negative reward.",
    "add_comment writes a comment on the ticket.",
    "assign_issue sets the assignee of the issue.",
    "The status changes from In Progress to In Review, then to Done.",
    "Blocked issues wait for another team.",
    "Choose the next tool: get_issue or transition_issue?",
    "PROJ-123 is in To Do; PROJ-124 is Done.",
    "The reward is 1.0 when the issue reaches Done.",
    "Step 3 of 10: status In Progress, last tool add_comment.",
    "The policy answers with a JSON tool call.",
    '{"tool": "transition_issue", "arguments": {"status": "Done"}}',
    "Hello! How can I help you with your Jira board today?",
    "You are a helpful assistant that manages issues.",
    "Please close the bug once the fix is merged.",
    "The sprint has 12 issues: 4 To Do, 5 In Progress and 3 Done.",
    "Résumé, naïve café — unicode text is bytes too.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 2026.",
    "user: what is the status of PROJ-7?\nassistant: It is In Progress.",
    "The quick brown fox jumps over the lazy dog.",
    "Tool results come back as text the model reads.",
    "Keep answers short and call one tool at a time.",
    "Reopen the issue if the tests fail again.",
    "The board columns are To Do, In Progress, In Review and Done.",
    "get_issue returns the summary, status and assignee.",
]

# The pre-tokenizer split regexes of the real families (tokenizer.json).
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

_CACHE: dict[tuple[str, bool, int, tuple[int, ...]], Path] = {}
_CACHE_ROOT: Path | None = None


def _cache_root() -> Path:
    global _CACHE_ROOT
    if _CACHE_ROOT is None:
        _CACHE_ROOT = Path(tempfile.mkdtemp(prefix="rl-studio-tiny-models-"))
        atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)
    return _CACHE_ROOT


def _build_tokenizer(arch: str):  # -> PreTrainedTokenizerFast
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if arch == "llama":
        specials = [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ]
        regex, trim = LLAMA3_REGEX, True
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        regex, trim = QWEN2_REGEX, False

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(
                add_prefix_space=False, trim_offsets=trim, use_regex=False
            ),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 2, trainer=trainer)
    # Special tokens go last, like real checkpoints (ids after the BPE vocab).
    tok.add_special_tokens(specials)

    if arch == "llama":
        from tokenizers import processors

        bos_id = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", bos_id)],
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>",
            pad_token="<|end_of_text|>",
            chat_template=LLAMA3_TEMPLATE,
            model_max_length=2048,
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=2048,
    )


def _build_model(
    arch: str,
    vocab_size: int,
    tie: bool,
    seed: int,
    tokenizer,
    size: tuple[int, int, int] = (64, 128, 2),
):
    import torch
    import transformers

    hidden, ffn, layers = size
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if arch == "llama":
        config = transformers.LlamaConfig(
            **common,
            bos_token_id=tokenizer.bos_token_id,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen2":
        config = transformers.Qwen2Config(
            **common,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
        cls = transformers.Qwen2ForCausalLM
    elif arch == "qwen3":
        config = transformers.Qwen3Config(
            **common,
            head_dim=32,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
        cls = transformers.Qwen3ForCausalLM
    else:
        raise ValueError(f"Unknown tiny architecture {arch!r}; use one of {ARCHES}.")
    torch.manual_seed(seed)
    model = cls(config)
    # Random init keeps most weights tiny; widen them a little so logits differ
    # visibly between tokens and a wrong export cannot hide under tolerances.
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:  # biases (Qwen2 q/k/v)
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    model.eval()
    return model


def _build(
    dest: Path, arch: str, tie: bool, seed: int, size: tuple[int, int, int]
) -> None:
    tokenizer = _build_tokenizer(arch)
    n = len(tokenizer)
    # Real checkpoints pad the embedding past the tokenizer (Qwen: 151936 rows
    # for 151665 tokens); do the same so exporters must pad the vocab.
    vocab_size = (n + 63) // 64 * 64 + 64
    model = _build_model(arch, vocab_size, tie, seed, tokenizer, size)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


def build_tiny_model(
    folder: Path,
    arch: str = "qwen2",
    tie_embeddings: bool = False,
    seed: int = 0,
    size: tuple[int, int, int] = (64, 128, 2),
) -> Path:
    """Write a tiny HF causal-LM folder (config, safetensors, tokenizer) and
    return its path.

    ``folder`` is the destination; if it exists and is not empty, the model
    goes into ``folder / f"{arch}-tiny"``. ``arch`` is ``"llama"``, ``"qwen2"``
    or ``"qwen3"`` (Qwen3 with a separate ``head_dim`` of 32). ``size`` is
    (hidden size, intermediate size, layers).
    """
    if arch not in ARCHES:
        raise ValueError(f"Unknown tiny architecture {arch!r}; use one of {ARCHES}.")
    key = (arch, bool(tie_embeddings), int(seed), tuple(size))
    cached = _CACHE.get(key)
    if cached is None or not (cached / "config.json").exists():
        tag = "x".join(str(n) for n in size)
        cached = _cache_root() / f"{arch}-tie{int(tie_embeddings)}-seed{seed}-{tag}"
        if cached.exists():
            shutil.rmtree(cached)
        _build(cached, arch, bool(tie_embeddings), int(seed), tuple(size))
        _CACHE[key] = cached
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        folder = folder / f"{arch}-tiny"
    shutil.copytree(cached, folder, dirs_exist_ok=True)
    return folder
