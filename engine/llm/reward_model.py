"""Learned reward: a reward model trained on the manual labels of traces.

* Text agents (steps with a prompt and a completion): a sequence-
  classification head on the base language model with a LoRA adapter,
  trained by TRL's ``RewardTrainer`` on preference pairs made from the
  labels (picked better-of-two, ideal answer over the recorded one, and each
  good step paired with a bad one).
* Control agents (steps with a numeric observation): a small MLP on the
  observation and the action, trained on good/bad.

Labels are split by step into train and held-out sets; the report gives the
held-out accuracy (good/bad predicted right) and pairwise accuracy. After
training the model suggests labels for the unlabelled steps of the same
traces, each with a confidence (:mod:`engine.store.labels` ``suggestions``),
for the studio's auto-labeler.

A reward-model folder (``<project>/data/reward_models/<name>/``) holds
``reward_model.json`` (kind, base, features, calibration, report) and the
weights (``adapter/`` for text, ``mlp.pt`` for control). The ``learned``
GRPO reward and :class:`LearnedRewardWrapper` (SB3) score with it:
p(good) in [0, 1].
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.llm.rollouts import iter_traces
from engine.llm.train import SEED_MAX
from engine.settings import build, drawn_seed, setting
from engine.store.atomic import atomic_write_json
from engine.store.labels import (
    LabelStore,
    Suggestion,
    has_labels,
    orphan_sentence,
    resolve,
    step_key,
)
from engine.store.paths import checked_name, child

AGENTS = ("auto", "text", "control")
META_FILE = "reward_model.json"
FOLDER = "data/reward_models"


@dataclass(frozen=True)
class RewardModelConfig:
    """Settings of a ``reward.train`` job."""

    traces: Any = None
    """Trace files whose labels train the model: one path or a list (None:
    every trace file of the project)."""
    agent: str = setting("auto", choices=AGENTS)
    """text: prompts and completions (a LoRA sequence-classification head on
    the base model); control: numeric observations (a small MLP); auto: text
    when the labelled steps have completions."""
    base_model: str = setting("")
    """Text agents: the language model (a folder or a Hub id) the head sits on."""
    epochs: int | None = setting(None, min=1, max=10_000)
    """Passes over the labels (None: 3 for text, 300 for control)."""
    learning_rate: float | None = setting(None, min=0, max=1, exclusive_min=True)
    """None: 1e-4 for text, 3e-3 for control."""
    lora_r: int = setting(8, min=1, max=256, label="LoRA rank")
    """Text agents: the rank of the LoRA adapter under the reward head."""
    hidden: int = setting(64, min=4, max=4096, label="MLP width")
    """Control agents: the width of the MLP's two hidden layers."""
    max_length: int = setting(512, min=16, max=32_768)
    """Text agents: the longest prompt + completion in tokens (cut on the left)."""
    validation_fraction: float = setting(
        0.2, min=0, max=1, exclusive_max=True, label="Held-out fraction"
    )
    """Fraction of the labelled steps held out to measure the accuracy."""
    min_labels: int = setting(8, min=2, max=100_000)
    """Fewer labelled steps than this (with both good and bad) refuse to train."""
    suggest: bool = setting(True, label="Suggest labels")
    """Score the unlabelled steps afterwards (auto-labeler suggestions)."""
    name: str | None = setting(None, check=checked_name)
    """Folder under data/reward_models/ (None: the run id)."""
    seed: int | None = setting(None, min=0, max=SEED_MAX)
    """Seed of the split and the training (None: drawn and recorded)."""


def validate(config: Mapping[str, Any]) -> RewardModelConfig:
    cfg = build(RewardModelConfig, config, "reward.train")
    if cfg.agent == "text" and not cfg.base_model.strip():
        raise ConfigError(
            "base_model", "A text reward model needs base_model (the language model)."
        )
    return replace(cfg, seed=drawn_seed(cfg.seed))


# ------------------------------------------------------------------ examples
@dataclass
class Examples:
    """Labelled steps of the traces, split into train and held-out."""

    traces: dict[str, list[dict[str, Any]]]
    train: list[tuple[tuple[str, int, int], bool]]
    held_out: list[tuple[tuple[str, int, int], bool]]
    pairs: list[tuple[tuple[str, int, int], tuple[str, int, int]]]
    ideal: dict[tuple[str, int, int], str]
    orphans: int

    def step(self, pos: tuple[str, int, int]) -> dict[str, Any]:
        return dict(self.traces[pos[0]][pos[1]]["steps"][pos[2]])


def trace_files(value: Any, project_dir: Path) -> list[Path]:
    if value in (None, "", []):
        folder = project_dir / "data" / "traces"
        return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        p = Path(str(item)).expanduser()
        if not p.is_absolute():
            for cand in (project_dir / p, project_dir / "data" / "traces" / p):
                if cand.is_file():
                    p = cand
                    break
        if not p.is_file():
            raise ConfigError("traces", f"Trace file {p} does not exist.")
        out.append(p)
    return out


def load_examples(
    project_dir: Path,
    files: list[Path],
    *,
    validation_fraction: float,
    min_labels: int,
    seed: int,
) -> Examples:
    traces = {f.stem: list(iter_traces(f)) for f in files}
    if not has_labels(project_dir):
        labels = []
    else:
        store = LabelStore(project_dir)
        try:
            labels = store.labels()
        finally:
            store.close()
    resolved = resolve(labels, traces)
    items = sorted(resolved.kto.items())
    good = sum(1 for _, v in items if v)
    if len(items) < min_labels or good == 0 or good == len(items):
        raise ConfigError(
            "traces",
            f"Training a reward model needs at least {min_labels} labelled steps, "
            f"some good and some bad; the traces have {len(items)} "
            f"({good} good, {len(items) - good} bad).",
        )
    rng = random.Random(seed)
    rng.shuffle(items)
    n_val = round(len(items) * validation_fraction)
    if validation_fraction > 0:
        n_val = max(n_val, 2)
    held_out, train = items[:n_val], items[n_val:]
    if not any(v for _, v in train) or all(v for _, v in train):
        # keep both classes in training: move one of the missing class over
        need = not any(v for _, v in train)
        i = next(i for i, (_, v) in enumerate(held_out) if v == need)
        train.append(held_out.pop(i))
    return Examples(
        traces, train, held_out, resolved.dpo, resolved.sft, resolved.orphans
    )


def _has_text(step: dict[str, Any]) -> bool:
    return bool(str(step.get("completion") or "").strip()) and bool(
        step.get("messages")
    )


def observation(step: dict[str, Any]) -> list[float] | None:
    """A control step's observation as numbers (None when it has none)."""
    state = step.get("state")
    obs = state.get("observation") if isinstance(state, dict) else None
    if obs is None and isinstance(step.get("observation"), list):
        obs = step["observation"]
    flat: list[float] = []

    def add(value: Any) -> bool:
        if isinstance(value, int | float) and math.isfinite(value):
            flat.append(float(value))
        elif isinstance(value, list):
            return all(add(v) for v in value)
        else:
            return False
        return True

    return flat if obs is not None and add(obs) and flat else None


def pick_agent(agent: str, ex: Examples) -> str:
    if agent != "auto":
        return agent
    steps = [ex.step(pos) for pos, _ in ex.train[:50]]
    if all(_has_text(s) for s in steps):
        return "text"
    if all(observation(s) is not None for s in steps):
        return "control"
    raise ConfigError(
        "agent",
        "The labelled steps have neither completions nor numeric observations; "
        "set agent to text or control.",
    )


# ------------------------------------------------------------------ control
@dataclass
class Features:
    """How a control step becomes the MLP's input: the observation, then the
    action one-hot (``actions`` > 0) or as numbers."""

    obs_dim: int
    actions: int = 0
    action_dim: int = 0

    def vector(self, obs: Any, action: Any) -> list[float]:
        values = (
            observation({"observation": obs}) if not isinstance(obs, dict) else None
        )
        x = list(values or [])
        if len(x) != self.obs_dim:
            raise ValueError(
                f"The observation has {len(x)} numbers; the reward model "
                f"expects {self.obs_dim}."
            )
        if self.actions:
            onehot = [0.0] * self.actions
            if isinstance(action, int | float) and 0 <= int(action) < self.actions:
                onehot[int(action)] = 1.0
            x += onehot
        elif self.action_dim:
            acts = observation({"observation": action}) or [0.0] * self.action_dim
            x += (acts + [0.0] * self.action_dim)[: self.action_dim]
        return x


def _features_of(steps: list[dict[str, Any]]) -> Features:
    obs = [observation(s) for s in steps]
    dims = {len(o) for o in obs if o is not None}
    if len(dims) != 1 or any(o is None for o in obs):
        raise ConfigError(
            "traces",
            "The labelled steps' observations are missing or differ in size; a "
            "control reward model needs one numeric observation size.",
        )
    actions = [s.get("action") for s in steps]
    ints = [a for a in actions if isinstance(a, int) and not isinstance(a, bool)]
    if len(ints) == len(actions):
        return Features(dims.pop(), actions=max(ints) + 1)
    lens = {len(observation({"observation": a}) or []) for a in actions}
    return Features(dims.pop(), action_dim=max(lens) if lens else 0)


def _step_vector(feat: Features, step: dict[str, Any]) -> list[float]:
    state = step.get("state")
    obs = (
        state.get("observation") if isinstance(state, dict) else step.get("observation")
    )
    return feat.vector(obs, step.get("action"))


def _mlp(d_in: int, hidden: int) -> Any:
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
    )


def train_control(
    ex: Examples, cfg: RewardModelConfig, folder: Path, ctx: Any
) -> tuple[dict[str, Any], Any]:
    import torch

    # a few thousand weights: one thread is fastest (more only contend)
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed or 0)
    feat = _features_of([ex.step(p) for p, _ in ex.train + ex.held_out])
    x = torch.tensor([_step_vector(feat, ex.step(p)) for p, _ in ex.train])
    y = torch.tensor([[1.0 if v else 0.0] for _, v in ex.train])
    mean, std = x.mean(0), x.std(0, unbiased=False).clamp_min(1e-6)
    net = _mlp(x.shape[1], cfg.hidden)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate or 3e-3)
    epochs = cfg.epochs or 300
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for epoch in range(epochs):
        if ctx is not None and ctx.should_stop:
            break
        opt.zero_grad()
        loss = loss_fn(net((x - mean) / std), y)
        loss.backward()
        opt.step()
        if ctx is not None and (epoch % 25 == 0 or epoch == epochs - 1):
            ctx.metrics(epoch, {"reward_model/loss": float(loss.detach())})
            ctx.progress(epoch + 1, epochs, "training the MLP")
    torch.save({"state": net.state_dict(), "mean": mean, "std": std}, folder / "mlp.pt")
    meta = {
        "kind": "control",
        "features": {
            "obs_dim": feat.obs_dim,
            "actions": feat.actions,
            "action_dim": feat.action_dim,
        },
        "hidden": cfg.hidden,
    }
    scorer = ControlScorer(folder, meta, net=net, mean=mean, std=std)
    return meta, scorer


class ControlScorer:
    """p(good) of control steps under a trained MLP."""

    def __init__(
        self,
        folder: Path,
        meta: dict[str, Any],
        net: Any = None,
        mean: Any = None,
        std: Any = None,
    ) -> None:
        import torch

        self.features = Features(**meta["features"])
        if net is None:
            data = torch.load(folder / "mlp.pt", weights_only=True)
            d_in = int(data["mean"].shape[0])
            net = _mlp(d_in, int(meta["hidden"]))
            net.load_state_dict(data["state"])
            mean, std = data["mean"], data["std"]
        self.net, self.mean, self.std = net.eval(), mean, std

    def probabilities(self, vectors: list[list[float]]) -> list[float]:
        import torch

        if not vectors:
            return []
        with torch.no_grad():
            x = (torch.tensor(vectors) - self.mean) / self.std
            return torch.sigmoid(self.net(x)).flatten().tolist()

    def score_steps(self, steps: list[dict[str, Any]]) -> list[float]:
        return self.probabilities([_step_vector(self.features, s) for s in steps])

    def score(self, obs: Any, action: Any) -> float:
        return self.probabilities([self.features.vector(obs, action)])[0]


# ------------------------------------------------------------------ text
def step_text(step: dict[str, Any], completion: str | None = None) -> str:
    """A step as the reward model reads it: the prompt's messages, then the
    answer."""
    messages = step.get("messages") or []
    prompt = "\n".join(
        f"{m.get('role', '')}: {m.get('content', '')}"
        for m in messages
        if isinstance(m, dict)
    )
    answer = step.get("completion") if completion is None else completion
    return f"{prompt}\nassistant: {answer}"


def _pairs(ex: Examples, rng: random.Random) -> list[dict[str, str]]:
    rows = []
    train_pos = {p for p, _ in ex.train}
    for better, worse in ex.pairs:
        if better in train_pos or worse in train_pos:
            rows.append(
                {
                    "chosen": step_text(ex.step(better)),
                    "rejected": step_text(ex.step(worse)),
                }
            )
    for pos, answer in ex.ideal.items():
        st = ex.step(pos)
        if answer.strip() != str(st.get("completion") or "").strip():
            rows.append({"chosen": step_text(st, answer), "rejected": step_text(st)})
    good = [p for p, v in ex.train if v]
    bad = [p for p, v in ex.train if not v]
    rng.shuffle(good)
    rng.shuffle(bad)
    for i in range(max(len(good), len(bad))):
        g, b = good[i % len(good)], bad[i % len(bad)]
        rows.append(
            {"chosen": step_text(ex.step(g)), "rejected": step_text(ex.step(b))}
        )
    return rows


def train_text(
    ex: Examples, cfg: RewardModelConfig, folder: Path, ctx: Any
) -> tuple[dict[str, Any], Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    rng = random.Random(cfg.seed)
    rows = _pairs(ex, rng)
    base = cfg.base_model
    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.truncation_side = "left"
    # tokenized here and cut on the left (the answer is at the end): the
    # trainer drops, rather than cuts, a pair longer than max_length
    limit = cfg.max_length

    def ids(text: str) -> list[int]:
        return list(tokenizer(text)["input_ids"])[-limit:]

    tokenized = [
        {"chosen_ids": ids(r["chosen"]), "rejected_ids": ids(r["rejected"])}
        for r in rows
    ]
    work = folder / "work"
    checkpointing: dict[str, Any] = {_checkpointing_arg(RewardConfig): False}
    args = RewardConfig(
        output_dir=str(work),
        num_train_epochs=cfg.epochs or 3,
        learning_rate=cfg.learning_rate or 1e-4,
        per_device_train_batch_size=4,
        max_length=cfg.max_length,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=cfg.seed or 0,
        disable_tqdm=True,
        # fp32: a small head trained on a few hundred labels; bf16 only
        # where the GPU has it
        bf16=bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
        use_cpu=not torch.cuda.is_available(),
        **checkpointing,
    )
    peft_config = LoraConfig(
        task_type="SEQ_CLS",
        r=cfg.lora_r,
        lora_alpha=2 * cfg.lora_r,
        lora_dropout=0.0,
        modules_to_save=["score"],
    )
    trainer = RewardTrainer(
        model=base,
        args=args,
        train_dataset=Dataset.from_list(tokenized),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    if ctx is not None:
        from transformers import TrainerCallback

        class Report(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
                if logs and "loss" in logs:
                    ctx.metrics(state.global_step, {"reward_model/loss": logs["loss"]})
                ctx.progress(state.global_step, state.max_steps or 1, "training")

            def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
                if ctx.should_stop:
                    control.should_training_stop = True

        trainer.add_callback(Report())
    trainer.train()
    adapter = folder / "adapter"
    model: Any = trainer.model
    model.save_pretrained(str(adapter))
    tokenizer.save_pretrained(str(adapter))
    scorer = TextScorer(folder, {"base": base, "max_length": cfg.max_length})
    scorer.model = model.eval()
    # calibration: the midpoint of the good and bad training scores is 0.5
    scores = scorer.raw([step_text(ex.step(p)) for p, _ in ex.train])
    goods = [s for s, (_, v) in zip(scores, ex.train, strict=True) if v]
    bads = [s for s, (_, v) in zip(scores, ex.train, strict=True) if not v]
    center = (sum(goods) / len(goods) + sum(bads) / len(bads)) / 2
    spread = (sum((s - center) ** 2 for s in scores) / len(scores)) ** 0.5 or 1.0
    meta = {
        "kind": "text",
        "base": base,
        "max_length": cfg.max_length,
        "center": center,
        "scale": spread,
    }
    scorer.center, scorer.scale = center, spread
    return meta, scorer


def _checkpointing_arg(config_cls: Any) -> str:
    """Transformers 5 renamed ``gradient_checkpointing``."""
    fields = getattr(config_cls, "__dataclass_fields__", {})
    if "activation_checkpointing" in fields:
        return "activation_checkpointing"
    return "gradient_checkpointing"


class TextScorer:
    """p(good) of (prompt, completion) texts under a trained reward head."""

    def __init__(self, folder: Path, meta: dict[str, Any]) -> None:
        self.folder = folder
        self.base = str(meta["base"])
        self.max_length = int(meta.get("max_length", 512))
        self.center = float(meta.get("center", 0.0))
        self.scale = float(meta.get("scale", 1.0)) or 1.0
        self.model: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        from transformers import AutoTokenizer

        if self._tokenizer is None:
            self._tokenizer = AutoTokenizer.from_pretrained(
                str(self.folder / "adapter")
            )
            self._tokenizer.truncation_side = "left"
            if self._tokenizer.pad_token is None:
                self._tokenizer.pad_token = self._tokenizer.eos_token
        if self.model is None:
            from peft import PeftModel
            from transformers import AutoModelForSequenceClassification

            model = AutoModelForSequenceClassification.from_pretrained(
                self.base, num_labels=1
            )
            model.config.pad_token_id = self._tokenizer.pad_token_id
            self.model = PeftModel.from_pretrained(
                model, str(self.folder / "adapter")
            ).eval()

    def raw(self, texts: list[str], batch: int = 8) -> list[float]:
        import torch

        self._load()
        device = next(self.model.parameters()).device
        out: list[float] = []
        for i in range(0, len(texts), batch):
            enc = self._tokenizer(
                texts[i : i + batch],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.max_length,
            ).to(device)
            with torch.no_grad():
                logits = self.model(**enc).logits
            out += logits[:, 0].float().cpu().tolist()
        return out

    def probabilities(self, texts: list[str]) -> list[float]:
        return [
            1.0
            / (1.0 + math.exp(-max(-60.0, min(60.0, (s - self.center) / self.scale))))
            for s in self.raw(texts)
        ]

    def score_steps(self, steps: list[dict[str, Any]]) -> list[float]:
        return self.probabilities([step_text(s) for s in steps])


def load_scorer(folder: str | Path) -> ControlScorer | TextScorer:
    """The scorer of a reward-model folder; ConfigError with one sentence
    when it is not one."""
    path = Path(folder).expanduser()
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(
            "model",
            f"{path} is not a reward model (no readable {META_FILE}); train one "
            "with reward.train.",
        ) from None
    if meta.get("kind") == "control":
        return ControlScorer(path, meta)
    if meta.get("kind") == "text":
        return TextScorer(path, meta)
    raise ConfigError("model", f"{path} holds an unknown reward model kind.")


# ------------------------------------------------------------------ report
def accuracy_report(ex: Examples, scorer: ControlScorer | TextScorer) -> dict[str, Any]:
    """Held-out accuracy (p > 0.5 is good) and pairwise accuracy (a good step
    scores above a bad one) on the held-out labels."""
    if not ex.held_out:
        return {"held_out": 0}
    probs = scorer.score_steps([ex.step(p) for p, _ in ex.held_out])
    right = sum(
        1 for p, (_, v) in zip(probs, ex.held_out, strict=True) if (p > 0.5) == v
    )
    good = [p for p, (_, v) in zip(probs, ex.held_out, strict=True) if v]
    bad = [p for p, (_, v) in zip(probs, ex.held_out, strict=True) if not v]
    pairs = [(g, b) for g in good for b in bad]
    return {
        "held_out": len(ex.held_out),
        "accuracy": right / len(ex.held_out),
        "pairwise_accuracy": (
            sum(1 for g, b in pairs if g > b) / len(pairs) if pairs else None
        ),
    }


def suggestions(
    ex: Examples,
    scorer: ControlScorer | TextScorer,
    model: str,
    labelled: set[tuple[str, int, int]],
) -> list[Suggestion]:
    """Suggested good/bad labels of every unlabelled step, with confidence."""
    todo = [
        (name, e, t, st)
        for name, eps in ex.traces.items()
        for e, ep in enumerate(eps)
        for t, st in enumerate(ep.get("steps") or [])
        if (name, e, t) not in labelled
    ]
    out = []
    for i in range(0, len(todo), 256):
        chunk = todo[i : i + 256]
        probs = scorer.score_steps([st for *_, st in chunk])
        for (name, e, t, st), p in zip(chunk, probs, strict=True):
            out.append(
                Suggestion(
                    trace=name,
                    episode=e,
                    step=t,
                    key=step_key(st),
                    value="good" if p > 0.5 else "bad",
                    confidence=max(p, 1.0 - p),
                    model=model,
                )
            )
    return out


# ------------------------------------------------------------------ the job
def train_reward_model(
    project_dir: Path, cfg: RewardModelConfig, folder: Path, ctx: Any = None
) -> dict[str, Any]:
    assert cfg.seed is not None  # validate() draws one
    files = trace_files(cfg.traces, project_dir)
    ex = load_examples(
        project_dir,
        files,
        validation_fraction=cfg.validation_fraction,
        min_labels=cfg.min_labels,
        seed=cfg.seed,
    )
    agent = pick_agent(cfg.agent, ex)
    if agent == "text" and not cfg.base_model.strip():
        raise ConfigError(
            "base_model", "A text reward model needs base_model (the language model)."
        )
    folder.mkdir(parents=True, exist_ok=True)
    trainer = train_text if agent == "text" else train_control
    meta, scorer = trainer(ex, cfg, folder, ctx)
    report = accuracy_report(ex, scorer)
    report.update(
        labels=len(ex.train) + len(ex.held_out),
        train=len(ex.train),
        orphan_labels=ex.orphans,
    )
    meta.update(report=report, traces=[str(f) for f in files], name=folder.name)
    atomic_write_json(folder / META_FILE, meta)
    suggested = 0
    if cfg.suggest:
        labelled = {p for p, _ in ex.train + ex.held_out}
        rows = suggestions(ex, scorer, folder.name, labelled)
        store = LabelStore(project_dir)
        try:
            store.replace_suggestions(list(ex.traces), rows)
            if report.get("accuracy") is not None:
                store.add_agreement(
                    folder.name,
                    "held-out",
                    round(report["accuracy"] * report["held_out"]),
                    report["held_out"],
                )
        finally:
            store.close()
        suggested = len(rows)
    return {
        "reward_model": str(folder),
        "agent": agent,
        "report": report,
        "suggestions": suggested,
    }


@job_kind(
    "reward.train",
    check=validate,
    label="Reward model",
    group="training",
    # the MLP's epochs or the LoRA head's optimizer steps: not env steps
    progress_unit="updates",
)
def run(ctx: JobContext, cfg: RewardModelConfig) -> dict[str, Any]:
    """Trains a reward model from the traces' manual labels (a LoRA reward head on a
    language model, or an MLP on observations), reports its held-out accuracy and
    suggests labels for unlabelled steps."""
    project_dir = Path(ctx.project_dir)
    name = cfg.name or f"reward-{ctx.run_id}"
    folder = child(project_dir, FOLDER, name, "name")
    result = train_reward_model(project_dir, cfg, folder, ctx)
    rep = result["report"]
    if rep.get("held_out"):
        ctx.log(
            f"{result['agent']} reward model: held-out accuracy "
            f"{rep['accuracy']:.0%} on {rep['held_out']} labels "
            f"(trained on {rep['train']})"
        )
        ctx.metrics(0, {"reward_model/held_out_accuracy": rep["accuracy"]})
    if rep.get("orphan_labels"):
        ctx.log(orphan_sentence(rep["orphan_labels"]))
    if cfg.suggest:
        ctx.log(f"{result['suggestions']} label suggestions for unlabelled steps")
    return result
