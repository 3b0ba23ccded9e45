"""Short human names that tell runs apart ("PPO CartPole-v1 · brisk-otter"),
as W&B's do: two words drawn at random, unique in the project, added to the
name a kind gives its runs (``JobKind.default_name``), and carried to the
model the run registers (``JobKind.model_name_field``).

Stdlib only.
"""

from __future__ import annotations

import random
from collections.abc import Collection

SEPARATOR = " · "
"""Between a run's kind-given name and its two words."""

ADJECTIVES = (
    "amber", "bold", "brisk", "calm", "clever", "crisp", "daring", "deft",
    "eager", "early", "fair", "fleet", "gentle", "glad", "golden", "grand",
    "hardy", "hazel", "honest", "ivory", "jolly", "keen", "kind", "lively",
    "lucid", "lucky", "merry", "mellow", "misty", "nimble", "noble", "olive",
    "patient", "plucky", "polar", "proud", "quick", "quiet", "rapid", "ready",
    "rosy", "rustic", "sage", "scarlet", "sharp", "silent", "silver", "sleek",
    "snowy", "solar", "steady", "stout", "sunny", "swift", "tidy", "true",
    "vivid", "warm", "wild", "wise", "witty", "young", "zesty", "zen",
)  # fmt: skip
NOUNS = (
    "otter", "falcon", "badger", "heron", "lynx", "marten", "osprey", "panda",
    "puffin", "raven", "robin", "salmon", "sparrow", "tapir", "walrus", "wombat",
    "acorn", "aspen", "birch", "cedar", "clover", "fern", "maple", "willow",
    "brook", "canyon", "delta", "dune", "fjord", "glacier", "harbor", "meadow",
    "comet", "nebula", "orbit", "photon", "pulsar", "quasar", "nova", "zenith",
    "anchor", "beacon", "compass", "lantern", "sextant", "summit", "tundra", "vale",
    "bison", "crane", "dingo", "egret", "gecko", "ibis", "jackal", "koala",
    "lemur", "magpie", "newt", "ocelot", "quail", "stoat", "viper", "yak",
)  # fmt: skip


def two_words(taken: Collection[str] = (), rng: random.Random | None = None) -> str:
    """``adjective-noun`` not among ``taken`` (4,096 pairs; once most are
    taken, a number follows: ``brisk-otter-2``)."""
    draw = rng or random.SystemRandom()
    for _ in range(64):
        words = f"{draw.choice(ADJECTIVES)}-{draw.choice(NOUNS)}"
        if words not in taken:
            return words
    n = 2
    while f"{words}-{n}" in taken:
        n += 1
    return f"{words}-{n}"


def words_of(run_name: str) -> str:
    """The two words a run's name ends with ('' when it has none)."""
    head, sep, words = run_name.rpartition(SEPARATOR)
    return words if sep and head else ""


def unique_name(base: str, taken_names: Collection[str]) -> str:
    """``base`` with two words that no name in ``taken_names`` ends with."""
    taken = {words_of(n) for n in taken_names} - {""}
    return f"{base}{SEPARATOR}{two_words(taken)}"
