"""Short human names that tell runs apart ("PPO CartPole-v1 · brisk-otter"),
as W&B's do: two words drawn at random, unique in the project, added to the
name a kind gives its runs (``JobKind.default_name``), and carried to the
model the run registers (``JobKind.model_name_field``).

Stdlib only (engine.flow, which it imports, is too).
"""

from __future__ import annotations

import random
from collections.abc import Collection
from pathlib import Path

from engine.flow import free_name

SEPARATOR = " · "
"""Between a run's kind-given name and its two words."""

WORDS_FILE = Path(__file__).with_name("run_words.txt")
"""The two word lists (data): adjectives, a blank line, nouns; ``#`` lines
are comments."""


def _word_lists() -> tuple[tuple[str, ...], tuple[str, ...]]:
    lines = WORDS_FILE.read_text(encoding="utf-8").splitlines()
    text = "\n".join(line for line in lines if not line.startswith("#"))
    adjectives, nouns = (tuple(words.split()) for words in text.strip().split("\n\n"))
    return adjectives, nouns


ADJECTIVES, NOUNS = _word_lists()


def two_words(taken: Collection[str] = (), rng: random.Random | None = None) -> str:
    """``adjective-noun`` not among ``taken`` (4,096 pairs; once most are
    taken, a number follows: ``brisk-otter-2``)."""
    draw = rng or random.SystemRandom()
    for _ in range(64):
        words = f"{draw.choice(ADJECTIVES)}-{draw.choice(NOUNS)}"
        if words not in taken:
            return words
    return free_name(words, taken, "-")


def words_of(run_name: str) -> str:
    """The two words a run's name ends with ('' when it has none)."""
    head, sep, words = run_name.rpartition(SEPARATOR)
    return words if sep and head else ""


def unique_name(base: str, taken_names: Collection[str]) -> str:
    """``base`` with two words that no name in ``taken_names`` ends with."""
    taken = {words_of(n) for n in taken_names} - {""}
    return f"{base}{SEPARATOR}{two_words(taken)}"
