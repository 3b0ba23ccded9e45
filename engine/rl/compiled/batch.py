"""Sweep trials trained together: the learners of trials that share one
compiled program (same env, same shapes; they differ only in the
:class:`~engine.rl.compiled.ppo.Hyper` values and seeds) hand their chunks to
a :class:`TrialBatch`, which runs them as one ``vmap``-ed program, up to
``slots`` trials at a time.

Each trial stays a run of its own: its thread runs the whole ``rl.train``
job (SB3 model, evaluation, checkpoints, Stop, registering its model), and
only the chunk call goes through the batch. A round runs when every
learner that joined has handed in its chunk; a learner that ends (its run
finished, was pruned or stopped) leaves, and the others go on without it.
A slot no learner fills repeats the first one's inputs with 0 updates, so
the program keeps one shape.
"""

from __future__ import annotations

import threading
from typing import Any

import jax
import jax.numpy as jnp

from engine.rl.compiled import ppo
from engine.rl.compiled.envs import CompiledEnv

ChunkResult = Any
"""What :func:`engine.rl.compiled.ppo.make_chunk`'s program returns for
one trial: (state, metrics, (done, ep_return, ep_length))."""


class TrialBatch:
    """Chunks of up to ``slots`` trials' learners run as one program."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a batch needs at least one slot")
        self.slots = slots
        self.key: tuple[CompiledEnv, ppo.Settings, int] | None = None
        """(env, settings, max_updates) of the program, set by the first
        learner that joins."""
        self._cond = threading.Condition()
        self._members: set[int] = set()
        self._pending: dict[int, tuple[Any, ...]] = {}
        self._results: dict[int, ChunkResult | BaseException] = {}
        self._next_id = 0
        self._program: Any = None

    # ----------------------------------------------------------- members

    def join(self, env: CompiledEnv, s: ppo.Settings, max_updates: int) -> int | None:
        """A member id for a learner of this program; None when the batch
        trains another program (the learner then trains alone)."""
        with self._cond:
            key = (env, s, max_updates)
            if self.key is None:
                self.key = key
            if self.key != key or len(self._members) >= self.slots:
                return None
            member = self._next_id
            self._next_id += 1
            self._members.add(member)
            return member

    def leave(self, member: int) -> None:
        """``member`` trains no more; a round that waited only on it runs."""
        with self._cond:
            self._members.discard(member)
            self._pending.pop(member, None)
            self._results.pop(member, None)
            take = self._take()
        if take:
            self._execute(take)

    # ------------------------------------------------------------ rounds

    def run(
        self,
        member: int,
        state: Any,
        n_updates: int,
        steps_before: int,
        hyper: ppo.Hyper,
    ) -> ChunkResult:
        """``member``'s chunk, run with the other members' in one round
        (the first round compiles the program: a Stop waits for it)."""
        with self._cond:
            self._pending[member] = (state, n_updates, steps_before, hyper)
            take = self._take()
        if take:
            self._execute(take)
        with self._cond:
            self._cond.wait_for(lambda: member in self._results)
            result = self._results.pop(member)
        if isinstance(result, BaseException):
            raise result
        return result

    def _take(self) -> dict[int, tuple[Any, ...]]:
        """The pending chunks when every member has handed one in (call
        with the lock held); the caller runs them."""
        if not self._pending or set(self._pending) != self._members:
            return {}
        take, self._pending = self._pending, {}
        return take

    def _execute(self, take: dict[int, tuple[Any, ...]]) -> None:
        try:
            outcome: dict[int, Any] = self._outcomes(take)
        except BaseException as exc:  # every member of the round gets it
            outcome = dict.fromkeys(take, exc)
        with self._cond:
            self._results.update(outcome)
            self._cond.notify_all()

    def _outcomes(self, take: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        members = sorted(take)
        rows = [take[m] for m in members]
        pad = [(rows[0][0], 0, *rows[0][2:])] * (self.slots - len(rows))
        filled = rows + pad
        states = jax.tree_util.tree_map(
            lambda *xs: jnp.stack(xs), *[r[0] for r in filled]
        )
        n = jnp.asarray([r[1] for r in filled], jnp.int32)
        steps = jnp.asarray([r[2] for r in filled], jnp.float32)
        hypers = jax.tree_util.tree_map(
            lambda *xs: jnp.stack(xs), *[r[3] for r in filled]
        )
        program = self._compiled(states, n, steps, hypers)
        out = program(states, n, steps, hypers)
        return {
            m: jax.tree_util.tree_map(lambda x, i=i: x[i], out)
            for i, m in enumerate(members)
        }

    def _compiled(self, states: Any, n: Any, steps: Any, hypers: Any) -> Any:
        """The vmap-ed program (compiled by the first round, from the
        persistent cache where it is there)."""
        if self._program is None:
            assert self.key is not None
            env, s, max_updates = self.key
            chunk = ppo.make_chunk(env, s, max_updates)
            self._program = (
                jax.jit(jax.vmap(chunk)).lower(states, n, steps, hypers).compile()
            )
        return self._program


ACTIVE: TrialBatch | None = None
"""The batch of this process's sweep worker, when its trials are trained
together (:func:`engine.rl.tune_trials.work`); None: every run trains alone."""
