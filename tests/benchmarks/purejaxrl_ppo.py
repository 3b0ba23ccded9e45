"""PureJaxRL's ``ppo.py`` on CartPole-v1 as its ``__main__`` runs it (issue 27's
reference), with ``DEBUG`` off, timed: run by the interpreter of a PureJaxRL
install, not the project's (see ``test_bench_compiled.py``).

Usage: ``PYTHON purejaxrl_ppo.py PUREJAXRL_CHECKOUT``. Prints one JSON line:
seconds of imports, compilation and training, and the final return.
"""

from __future__ import annotations

import json
import sys
import time
import types

START = time.perf_counter()
# wrappers.py imports brax and navix for its Brax and MiniGrid wrappers, which
# CartPole does not use: stand-ins keep PureJaxRL's files as published.
for _name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training",
              "navix"):  # fmt: skip
    sys.modules[_name] = types.ModuleType(_name)
_training = sys.modules["brax.envs.wrappers.training"]
_training.EpisodeWrapper = _training.AutoResetWrapper = object  # type: ignore[attr-defined]
sys.path.insert(0, f"{sys.argv[1]}/purejaxrl")

import jax  # noqa: E402
from ppo import make_train  # type: ignore[import-not-found]  # noqa: E402

CONFIG = {  # ppo.py's __main__ config, DEBUG off (it prints every episode)
    "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5,
    "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True,
    "DEBUG": False,
}  # fmt: skip

rng = jax.random.PRNGKey(30)
train = jax.jit(make_train(CONFIG))
imported = time.perf_counter()
compiled = train.lower(rng).compile()
ready = time.perf_counter()
returns = compiled(rng)["metrics"]["returned_episode_returns"]
jax.block_until_ready(returns)
done = time.perf_counter()
print(
    json.dumps(
        {
            "imports_s": imported - START,
            "compile_s": ready - imported,
            "train_s": done - ready,
            "final_return": float(returns[-1].mean()),
        }
    )
)
