"""The ``jax`` backend's ``learn``: it drives training in chunks of compiled
PPO updates instead of ``model.learn``. The run's
:class:`engine.rl.train.Trainer` builds an SB3 model as for SB3, which holds
the policy that is checkpointed and registered, but only after the first
update: that update and its metrics row need JAX alone, so a run whose
program is in the compilation cache shows its first row before torch and SB3
have imported. Between chunks this copies the weights and Adam moments into
the SB3 model, logs each update's metrics through the run's logger (the same
keys an SB3 run logs) and calls ``Trainer.on_step``, which reports progress,
evaluates (in the compiled twin), checkpoints and honours Stop as for an SB3
run.
"""

from __future__ import annotations

import io
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError
from engine.rl.compiled.support import cache_root
from engine.settings import same_named

if TYPE_CHECKING:
    from engine.rl.config import TrainConfig
    from engine.rl.policy import Evaluation

CHUNK_STEPS_MAX = 50_000
"""The most environment steps between two returns to Python: Stop, progress,
evaluation and checkpoints happen at chunk ends."""
STOP_POLL_S = 0.1
"""How often Stop is looked at while the program compiles (seconds)."""
_PROGRAMS: dict[tuple[Any, ...], Any] = {}
"""The compiled programs of this process, by what they were compiled for:
a sweep worker's trials and the runs of one process skip even the tracing
and cache lookup (about a second) that a run in a new process pays."""
EPISODE_WINDOW = 100
"""Episodes averaged by ``rollout/ep_rew_mean`` (SB3's ``stats_window_size``)."""


def compilation_cache_dir() -> Path:
    """JAX's persistent compilation cache: the user's cache folder."""
    return cache_root() / "jax"


def _enable_cache() -> Path:
    import jax

    folder = compilation_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    update: Any = jax.config.update  # untyped in jax's stubs
    update("jax_compilation_cache_dir", str(folder))
    update("jax_persistent_cache_min_compile_time_secs", 0.0)
    update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


SAME_NAMED_SETTINGS = (
    "n_steps batch_size n_epochs normalize_advantage activation ortho_init"
)
"""The compiled program's settings (``ppo.Settings``) that are PPO settings of
the same name; :func:`settings_of` computes the rest."""


def settings_of(cfg: TrainConfig) -> tuple[Any, Any]:
    """The compiled program's :class:`~engine.rl.compiled.ppo.Settings` and
    the :class:`~engine.rl.compiled.ppo.Hyper` values it runs with, of a
    validated config: the same setting means the same on both backends."""
    from engine.rl.compiled.ppo import Hyper, Settings, hyper
    from engine.rl.config import PPOBase, PPOConfig

    hp = cfg.hyperparameters
    assert isinstance(hp, PPOBase), "the jax backend trains PPO (support.ALGOS)"
    assert cfg.n_envs is not None and cfg.total_steps is not None  # validated
    settings = Settings(
        **same_named(hp, SAME_NAMED_SETTINGS),
        n_envs=cfg.n_envs,
        net_arch=tuple(hp.net_arch),
        # MaskablePPO has no log_std_init: its actions are discrete
        log_std_init=hp.log_std_init if isinstance(hp, PPOConfig) else 0.0,
        learning_rate_linear=hp.learning_rate_schedule == "linear",
        clip_range_linear=hp.clip_range_schedule == "linear",
        masked=cfg.algo == "MaskablePPO",
    )
    # Every value of the program but the run's length is the setting of its name.
    values = hyper(
        **same_named(hp, (n for n in Hyper._fields if n != "total_steps")),
        total_steps=cfg.total_steps,
    )
    return settings, values


def chunk_updates(cfg: TrainConfig, rollout: int) -> int:
    """The most updates of one compiled chunk (a shape of the program): as
    many as reach the next evaluation or checkpoint, within
    :data:`CHUNK_STEPS_MAX`."""
    assert cfg.total_steps is not None  # validated
    every = (cfg.eval_every_steps, cfg.checkpoint_every_steps)
    limits = [CHUNK_STEPS_MAX, cfg.total_steps, *(n for n in every if n)]
    return max(1, math.ceil(min(limits) / rollout))


def updates_until_due(trainer: Any, steps: int, rollout: int, most: int) -> int:
    """Updates of the next chunk: it ends at the first rollout at or past
    the next evaluation, checkpoint or the end of the run, where an SB3 run
    would do them."""
    due: list[int] = [trainer.total_steps]
    due += [d for d in (trainer.next_eval_step, trainer.next_ckpt_step) if d]
    return max(1, min(most, math.ceil((min(due) - steps) / rollout)))


def compile_unless_stopped(build: Callable[[], Any], ctx: Any) -> Any | None:
    """``build()`` (XLA compiling: seconds, tens of them on a busy machine)
    on a thread of its own while Stop is watched; None when Stop came first.
    The thread is a daemon, left to end: the job saves its checkpoint and
    exits without waiting for it (an exiting process does not)."""
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["program"] = build()
        except BaseException as exc:  # re-raised below, in the job's thread
            result["error"] = exc

    thread = threading.Thread(target=work, name="jax-compile", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(STOP_POLL_S)
        if thread.is_alive() and ctx.should_stop:
            return None
    if "error" in result:
        raise result["error"]
    return result["program"]


def learn(trainer: Any) -> None:
    """Train ``trainer``'s model from its current step to ``total_steps``
    with the compiled PPO: alone, or with the other trials of this process's
    sweep (:data:`engine.rl.compiled.batch.ACTIVE`) as one program."""
    try:
        import jax
    except ImportError as exc:  # a broken install, found after validation
        raise EngineError(
            f"JAX could not be imported ({exc}); reinstall rl-studio[jax] or train "
            "with backend sb3."
        ) from None
    device = jax_device(trainer.cfg)
    with jax.default_device(device):
        _learn_on(trainer, device)


def jax_device(cfg: TrainConfig) -> Any:
    """The JAX device a run trains on: JAX's first (a GPU where the CUDA
    jaxlib finds one), or the CPU when the run's ``device`` is ``cpu`` (say,
    from the ``cpu`` hardware profile)."""
    import jax

    return jax.devices("cpu")[0] if cfg.device == "cpu" else jax.devices()[0]


def _learn_on(trainer: Any, device: Any) -> None:
    import jax.numpy as jnp

    from engine.rl.compiled import batch, ppo
    from engine.rl.compiled.envs import compiled_env
    from engine.rl.compiled.sb3 import copy_from_sb3

    ctx = trainer.ctx
    cfg: TrainConfig = trainer.cfg
    stages = _Stages(trainer) if cfg.curriculum is not None else None
    env = stages.twin() if stages is not None else compiled_env(cfg.env, cfg.env_kwargs)
    if env is None:  # validation let it through: a bug, said plainly
        raise EngineError(f"{cfg.env} has no compiled twin; use backend sb3.")
    s, h = settings_of(cfg)
    cache = _enable_cache()
    steps = trainer.num_timesteps
    state = ppo.init_state(env, s, trainer.seed + steps)
    if trainer.resumed_from is not None:
        params, adam = copy_from_sb3(trainer.model, state.params)
        state = state._replace(params=params)
        if adam is not None:
            m, v, t = adam
            state = state._replace(adam_m=m, adam_v=v, adam_t=jnp.int32(t))
    max_updates = chunk_updates(cfg, s.rollout)
    on = f"jax backend on {device.platform} ({device.device_kind}): PPO and {cfg.env}"

    sweep = batch.ACTIVE
    if sweep is not None and stages is not None:
        # The trials of one program play one env; a curriculum moves its own.
        ctx.log(f"{on}: a curriculum run trains alone, not with the sweep's trials")
        sweep = None
    member = sweep.join(env, s, max_updates) if sweep is not None else None
    if sweep is not None and member is not None:
        ctx.log(
            f"{on} trained with up to {sweep.slots - 1} other trials of the sweep "
            f"as one vmap-ed program of up to {max_updates} updates"
        )
        try:
            _train_chunks(
                trainer, env, s, state, max_updates,
                lambda st, n, before: sweep.run(member, st, n, before, h),
            )  # fmt: skip
        finally:
            sweep.leave(member)
        return

    def program(env: Any, state: Any) -> Callable[[Any, int, int], Any] | None:
        """The chunk program for ``env``, compiled, loaded from the cache or
        reused; None when Stop came first."""
        chunk_key = ("chunk", env, s, max_updates)
        reused = chunk_key in _PROGRAMS
        cached_before = len(list(cache.iterdir()))
        t0 = time.perf_counter()
        chunk = _PROGRAMS.get(chunk_key) or compile_unless_stopped(
            lambda: (
                ppo.make_chunk(env, s, max_updates)
                .lower(state, jnp.int32(max_updates), jnp.float32(0), h)
                .compile()
            ),
            ctx,
        )
        if chunk is None:
            return None
        _PROGRAMS[chunk_key] = chunk
        added = len(list(cache.iterdir())) - cached_before
        if reused:
            where = "already compiled in this process"
        elif added > 0:
            where = f"stored in the compilation cache ({cache})"
        else:
            where = f"loaded from the compilation cache ({cache})"
        stage = "" if stages is None else f" (curriculum stage {stages.stage})"
        ctx.log(
            f"{on}{stage} compiled as one program of up to {max_updates} updates "
            f"in {time.perf_counter() - t0:.1f} s, {where}"
        )
        return lambda st, n, before: chunk(st, jnp.int32(n), jnp.float32(before), h)

    run_chunk = program(env, state)
    if run_chunk is None:
        trainer.stopped_by = ctx.stop_reason
        ctx.log("stopped while the program compiled; nothing was trained")
        _hold(trainer, state, steps, int(getattr(trainer.model, "_n_updates", 0)))
        return
    _train_chunks(trainer, env, s, state, max_updates, run_chunk, stages, program)


class _Stages:
    """A curriculum run's twins: one per stage, made from the designed env
    at that stage's difficulty when first played. Each is a program of its
    own (a stage's tables are constants of it, as the env's are), compiled
    once and then cached like any other."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.twins: dict[int, Any] = {}
        self.stage = self.now()

    def now(self) -> int:
        """The schedule's stage (the trainer builds it with the SB3 model,
        after the first update, or first when resuming)."""
        curriculum = self.trainer.curriculum
        if curriculum is not None:
            return int(curriculum.schedule.stage)
        return int(self.trainer.cfg.curriculum.start_stage)

    def twin(self) -> Any:
        """The twin of the current stage."""
        from engine.rl.compiled.envs import compiled_env

        if self.stage not in self.twins:
            cfg = self.trainer.cfg
            self.twins[self.stage] = compiled_env(
                cfg.env, cfg.env_kwargs, cfg.curriculum.stages[self.stage]
            )
        return self.twins[self.stage]

    def moved(self) -> bool:
        """Whether the last evaluation moved the schedule (then :meth:`twin`
        is the new stage's)."""
        now = self.now()
        moved, self.stage = now != self.stage, now
        return moved


def _evaluation_in_twin(
    trainer: Any, env: Any, s: Any, params: Callable[[], Any]
) -> Callable[[], Evaluation]:
    """The trainer's evaluation played in the compiled twin (proven to step
    as the Gymnasium env) with the policy ``params()`` gives, each
    evaluation with draws of its own. The program is compiled (or loaded) at
    the first evaluation: a run without evaluations needs none."""
    import jax
    import numpy as np

    from engine.rl.compiled import ppo
    from engine.rl.policy import EVAL_SEED_OFFSET, Evaluation

    cfg: TrainConfig = trainer.cfg
    episodes = cfg.eval_episodes
    eval_key = jax.random.PRNGKey(trainer.seed + EVAL_SEED_OFFSET)
    program = ("evaluate", env, s, episodes, cfg.eval_deterministic)

    def play() -> Evaluation:
        nonlocal eval_key
        evaluate = _PROGRAMS.get(program)
        if evaluate is None:
            evaluate = compile_unless_stopped(
                lambda: (
                    ppo.make_evaluate(env, s, episodes, cfg.eval_deterministic)
                    .lower(params(), eval_key)
                    .compile()
                ),
                trainer.ctx,
            )
            if evaluate is None:
                return Evaluation(stopped=True)
            _PROGRAMS[program] = evaluate
        eval_key, draws = jax.random.split(eval_key)
        returns, lengths, won = (np.asarray(x) for x in evaluate(params(), draws))
        return Evaluation(
            rewards=returns.tolist(),
            lengths=lengths.tolist(),
            successes=won.tolist() if env.is_success is not None else [],
        )

    return play


def _refuse_non_finite(trainer: Any, loss: float, steps: int) -> None:
    """Stop a run whose loss is no longer finite, its last finite policy
    saved: the SB3 model holds the previous chunk's state (:func:`_hold`)."""
    if math.isfinite(loss):
        return
    good = trainer.num_timesteps
    trainer.save_checkpoint()
    raise EngineError(
        f"The loss became {loss} at step {steps:,}, so training stopped with "
        f"the policy of step {good:,} saved as its last checkpoint; lower the "
        "learning rate or max_grad_norm."
    )


def _log_update(
    logger: Any,
    row: dict[str, float],
    episodes: deque[tuple[float, int]],
    *,
    n_updates: int,
    fps: float,
    steps: int,
) -> None:
    """One update's line of SB3's log, with the keys SB3's PPO writes."""
    import numpy as np

    if episodes:
        logger.record("rollout/ep_rew_mean", float(np.mean([e[0] for e in episodes])))
        logger.record("rollout/ep_len_mean", float(np.mean([e[1] for e in episodes])))
    for key, value in row.items():
        logger.record(key, value)
    logger.record("train/n_updates", n_updates)
    logger.record("time/fps", fps)
    logger.record("time/total_timesteps", steps)
    logger.dump(steps)


def _hold(trainer: Any, state: Any, steps: int, n_updates: int) -> None:
    """The compiled state's policy and Adam moments into the trainer's
    model (made now if it is not yet), so a checkpoint, an evaluation or the
    end saves SB3's own ``model.zip``: an SB3 model, or where the settings
    have a template, a :class:`~engine.rl.compiled.sb3_file.FileModel` that
    writes the file without torch."""
    import jax

    from engine.rl.compiled import sb3_file
    from engine.rl.compiled.sb3 import copy_to_sb3

    params = jax.device_get(state.params)
    adam = (
        jax.device_get(state.adam_m),
        jax.device_get(state.adam_v),
        int(state.adam_t),
    )
    fresh = trainer.model is None
    if fresh:
        trainer.model = _file_model(trainer, params, adam)
    trainer.ensure_built()
    model = trainer.model
    if isinstance(model, sb3_file.FileModel):
        model.hold(params, adam)
    else:
        copy_to_sb3(model, params, adam)
        if fresh and trainer.resumed_from is None and not trainer.cfg.start_from:
            sb3_file.keep_template(trainer.cfg, model)
    model.num_timesteps = steps
    model._n_updates = n_updates


def _file_model(trainer: Any, params: Any, adam: Any) -> Any:
    """A :class:`~engine.rl.compiled.sb3_file.FileModel` where the run's
    settings have a template and the run needs nothing else of SB3 (no
    normalization statistics, curriculum envs or videos, not continued from
    a saved model); None to build the SB3 model."""
    from engine.rl.compiled import sb3_file

    cfg = trainer.cfg
    needs_sb3 = (
        cfg.vec_normalize
        or cfg.curriculum is not None
        or cfg.eval_video_episodes > 0
        or cfg.start_from
        or trainer.resumed_from is not None
    )
    template = None if needs_sb3 else sb3_file.template_path(cfg)
    if template is None or not template.exists():
        return None
    try:  # read, and a file written now rather than at the first checkpoint
        model = sb3_file.FileModel(template, trainer.seed)
        model.hold(params, adam)
        model.save(io.BytesIO())
    except sb3_file.TEMPLATE_ERRORS as exc:
        # Damaged or not of these settings after all: SB3 builds the model,
        # and this run's keeps a good template in its place.
        template.unlink(missing_ok=True)
        trainer.ctx.log(
            f"the SB3 model template {template.name} could not be used ({exc}); "
            "building the SB3 model"
        )
        return None
    trainer.ctx.log(
        "the SB3 model file is written from the template these settings' first "
        f"jax run saved ({template}), without importing torch"
    )
    return model


def _train_chunks(
    trainer: Any,
    env: Any,
    s: Any,
    state: Any,
    max_updates: int,
    run_chunk: Callable[[Any, int, int], Any],
    stages: _Stages | None = None,
    program: Callable[[Any, Any], Callable[[Any, int, int], Any] | None] | None = None,
) -> None:
    """The chunks of a run, each ``run_chunk(state, n_updates, steps_before)``,
    with SB3's logging, evaluation in the twin, checkpoints and Stop between
    them; a curriculum's ``stages`` change the twin (and the program, from
    ``program(env, state)``) where an evaluation moves the schedule."""
    import numpy as np

    from engine.envs.curriculum import STAGE_METRIC
    from engine.rl.compiled import ppo

    ctx = trainer.ctx
    steps = trainer.num_timesteps
    # The closure reads ``state`` as each chunk leaves it.
    trainer.play_evaluation = _evaluation_in_twin(trainer, env, s, lambda: state.params)
    episodes: deque[tuple[float, int]] = deque(maxlen=EPISODE_WINDOW)
    # SB3's count of gradient epochs, carried in model.zip across a resume
    n_updates = int(getattr(trainer.model, "_n_updates", 0))
    while steps < trainer.total_steps:
        if ctx.should_stop:
            trainer.stopped_by = ctx.stop_reason
            _hold(trainer, state, steps, n_updates)
            return
        # Before the SB3 model exists, one update: its row is the run's
        # first, and the model is built after it.
        first = trainer.model is None
        n = 1 if first else updates_until_due(trainer, steps, s.rollout, max_updates)
        before = (state, steps, n_updates)
        started = time.perf_counter()
        state, metrics, (done, ep_return, ep_length) = run_chunk(state, n, steps)
        metrics, done, ep_return, ep_length = (
            np.asarray(x)[:n] for x in (metrics, done, ep_return, ep_length)
        )
        fps = n * s.rollout / max(time.perf_counter() - started, 1e-9)
        for i in range(n):
            steps += s.rollout
            n_updates += s.n_epochs
            finished = done[i]
            episodes.extend(
                zip(
                    ep_return[i][finished].tolist(),
                    ep_length[i][finished].tolist(),
                    strict=True,
                )
            )
            row = dict(zip(ppo.METRIC_KEYS, metrics[i].tolist(), strict=True))
            if first and not math.isfinite(row["train/loss"]):
                _hold(trainer, *before)  # the last finite policy is the first
            _refuse_non_finite(trainer, row["train/loss"], steps)
            if not env.continuous:
                del row["train/std"]
            if stages is not None:  # as SB3's CurriculumCallback, every rollout
                row[STAGE_METRIC] = float(stages.stage)
            _log_update(
                trainer.logger, row, episodes, n_updates=n_updates, fps=fps, steps=steps
            )
        _hold(trainer, state, steps, n_updates)
        if not trainer.on_step(steps):
            return
        if stages is not None and program is not None and stages.moved():
            # SB3's envs take a new stage from their next episode; these all
            # start one now, in the new stage's twin and program.
            env = stages.twin()
            state = ppo.new_episodes(env, s, state)
            moved_to = program(env, state)
            if moved_to is None:
                trainer.stopped_by = ctx.stop_reason
                _hold(trainer, state, steps, n_updates)
                return
            run_chunk = moved_to
            trainer.play_evaluation = _evaluation_in_twin(
                trainer,
                env,
                s,
                lambda: state.params,  # noqa: B023 (as above)
            )
