"""Runs and their models can be told apart (issue 29, item 1): a run its
caller does not name gets its kind's name and two words unique in the
project ("PPO CartPole-v1 · brisk-otter"), and its model takes that name."""

from __future__ import annotations

import random

from engine.jobs.names import ADJECTIVES, NOUNS, SEPARATOR, two_words, unique_name
from engine.jobs.registry import named_run, run_name

CONFIG = {"env": "CartPole-v1", "algo": "PPO", "name": ""}


def test_two_words_are_unique_among_those_taken() -> None:
    rng = random.Random(0)
    taken: set[str] = set()
    for _ in range(300):
        words = two_words(taken, rng)
        assert words not in taken
        taken.add(words)
    # Every pair taken: a number tells the next one apart.
    every = {f"{a}-{n}" for a in ADJECTIVES for n in NOUNS}
    assert two_words(every, rng).rsplit("-", 1)[1] == "2"


def test_an_unnamed_run_and_its_model_share_a_unique_name() -> None:
    first, record = named_run("rl.train", CONFIG)
    assert first.startswith(f"PPO CartPole-v1{SEPARATOR}") and record["name"] == first
    second, _ = named_run("rl.train", CONFIG, taken=[first])
    assert second != first and second.startswith("PPO CartPole-v1 · ")
    assert second.split(SEPARATOR)[1] != first.split(SEPARATOR)[1]


def test_a_name_given_is_kept_and_a_kind_without_one_gets_none() -> None:
    assert run_name("rl.train", CONFIG, "my run") == "my run"
    assert run_name("rl.train", {**CONFIG, "name": "champion"}) == "champion"
    name, record = named_run("rl.train", {**CONFIG, "name": "champion"})
    assert (name, record["name"]) == ("champion", "champion")
    # Kinds that name no run of their own (an export) are not given words.
    assert run_name("export.onnx", {"policy": "m.zip"}) == ""
    assert unique_name("sweep s", ["sweep s · calm-otter"]) != "sweep s · calm-otter"
