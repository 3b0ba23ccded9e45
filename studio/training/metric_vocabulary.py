"""The metric vocabulary of the studio's trainers, for its live plots: which
stable-baselines3, TRL and studio metric keys share a chart, each chart's y
axis, and the bookkeeping keys not worth a curve. The plot widget
(:class:`widgets.live_plot.LivePlotPanel`) knows none of these names; the
training workspace gives it :data:`TRAINING_METRICS`."""

from __future__ import annotations

from widgets.live_plot import PlotVocabulary, group_for_key

#: Group title and the key patterns (``fnmatch`` globs) that belong to it,
#: matched against a key's name (:func:`metric_name`: a flow run's
#: ``<node>/`` prefix left out). An exact name listed anywhere wins over a
#: glob; globs are tried in order. One group per scale: rewards apart from
#: their spread, KL apart from losses, the learning rate alone.
_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Rewards",
        (
            "rollout/ep_rew_mean",
            "eval/mean_reward",
            "eval/episode_reward",
            "eval/mean_return",
            # TRL (engine.llm.train): the mean reward and one per function.
            "reward/mean",
            "reward/*_mean",
            "eval/reward",  # GRPO's held-out reward
        ),
    ),
    ("Reward std", ("reward/std", "reward/*_std")),
    (
        "Episode length",
        (
            "rollout/ep_len_mean",
            "eval/mean_ep_length",
            "eval/mean_length",
        ),
    ),
    # The validation loss beside the training loss it checks.
    ("Losses", ("train/*loss*", "eval/loss")),
    ("KL", ("train/kl", "train/approx_kl", "*/kl", "*/kl_*")),
    (
        "Completion length",
        ("completion/*length*",),
    ),
    (
        "Clip ratio",
        ("completion/clipped_ratio", "*/clip_ratio*", "train/clip_fraction"),
    ),
    (
        "Policy",
        (
            "train/entropy_loss",
            "train/entropy",
            "train/explained_variance",
            "train/ent_coef",
        ),
    ),
    ("Learning rate", ("train/learning_rate",)),
    ("Exploration", ("rollout/exploration_rate", "train/exploration_rate")),
    ("Gradient norm", ("train/grad_norm",)),
    ("Throughput", ("time/fps",)),
    ("Generation speed", ("train/tokens_per_s", "eval/tokens_per_s")),
    (
        "Rates",
        (
            "eval/*_rate",
            "eval/expert_agreement",
            "curriculum/success_rate",
        ),
    ),
    # The stage a curriculum run plays at (a step curve: 0, 1, 2, ...).
    ("Curriculum stage", ("curriculum/stage",)),
    # A language-model collection logs once an episode: its x axis counts
    # episodes, so its curves do not share a chart with training steps.
    ("Return by episode", ("rollout/ep_rew",)),
    ("Length by episode", ("rollout/ep_len",)),
    ("Rates by episode", ("rollout/success", "rollout/*_rate")),
)
#: The y axis title (with its unit) of each group; the x axis says steps or
#: seconds.
_AXES: dict[str, str] = {
    "Rewards": "return",
    "Reward std": "reward std",
    "Episode length": "steps",
    "Losses": "loss",
    "KL": "KL (nats)",
    "Completion length": "tokens",
    "Clip ratio": "fraction clipped",
    "Policy": "value",
    "Learning rate": "learning rate",
    "Exploration": "probability",
    "Gradient norm": "L2 norm",
    "Throughput": "steps/s",
    "Generation speed": "tokens/s",
    "Rates": "fraction",
    "Curriculum stage": "stage",
    "Return by episode": "return",
    "Length by episode": "steps",
    "Rates by episode": "fraction",
}
#: The x axis title of the groups whose steps are not training steps.
_X_TITLES = dict.fromkeys(
    ("Return by episode", "Length by episode", "Rates by episode"), "episodes"
)
#: Groups whose values are whole numbers.
_INTEGERS = ("Curriculum stage", "Length by episode")
#: Bookkeeping keys SB3 and TRL log that are not worth a curve.
_IGNORED: tuple[str, ...] = (
    "time/iterations",
    "time/time_elapsed",
    "time/total_timesteps",
    "time/episodes",
    "train/n_updates",
    "train/epoch",
    "train/num_tokens",
    "eval/episodes",  # an evaluation's episode count
)


TRAINING_METRICS = PlotVocabulary(
    groups=_GROUPS,
    axes=_AXES,
    ignored=_IGNORED,
    x_titles=_X_TITLES,
    integers=_INTEGERS,
)
"""What the training workspace's plots group, title and leave out."""


def group_of(key: str) -> str | None:
    """The chart a metric key is drawn in (None: not drawn)."""
    return group_for_key(key, _GROUPS, _IGNORED)
