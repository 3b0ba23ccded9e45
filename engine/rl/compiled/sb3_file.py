"""A ``jax`` run's ``model.zip`` written without torch.

A compiled run trains in JAX, yet saves stable-baselines3's own file, so
that Evaluate, Play, ONNX export and the HTTP ``act`` route load it as any
other. Building an SB3 model for that costs a new process about three
seconds (importing torch and SB3, building the envs and the policy): more
than a short run trains. So the first ``jax`` run of some settings keeps the
file its SB3 model saved as a *template* beside JAX's compilation cache, and
later runs of the same settings write their ``model.zip`` from it, with the
weights, Adam moments, step counts and seed of their own, without importing
torch. A template holds what the settings alone decide (the policy class,
the spaces, the schedules, the tensors' names, shapes and order); its key
covers the settings and the versions of the packages that wrote it.

The file is the template's, entry for entry, with three changed:
``policy.pth`` and ``policy.optimizer.pth`` (torch's zip of a pickle and raw
little-endian tensor bytes: the pickle is kept, each tensor's bytes are
replaced, every one of them, each checked for its shape) and ``data``
(``num_timesteps``, ``_n_updates`` and ``seed``). The action space pickled
in ``data`` keeps the template's random state; SB3 reseeds it from ``seed``
when it loads the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import struct
import zipfile
from collections import OrderedDict
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import numpy as np

from engine.rl.compiled.sb3 import torch_layout
from engine.rl.compiled.support import cache_root

if TYPE_CHECKING:
    from engine.rl.compiled.ppo import Params
    from engine.rl.config import TrainConfig

FORMAT = 1
"""Changes when what a template holds or how it is keyed changes."""
PACKAGES = ("stable_baselines3", "sb3_contrib", "torch", "gymnasium", "numpy")
"""Whose versions decide what SB3 writes (pickled classes and spaces)."""
POLICY_GROUPS = (
    "mlp_extractor.policy_net.",
    "mlp_extractor.value_net.",
    "action_net.",
    "value_net.",
    "log_std",
)
"""SB3 policy parameter names by the part they belong to, in the order of
:func:`engine.rl.compiled.sb3.torch_layout`."""
TEMPLATE_ERRORS = (
    ValueError,  # json's errors among them
    KeyError,
    IndexError,
    TypeError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    pickle.UnpicklingError,
)
"""What a damaged template, or one of other settings, raises when written."""
ALIGNMENT = 64
"""Where torch starts each tensor's bytes in its zip (``.storage_alignment``)."""


def templates_dir() -> Path:
    """Beside JAX's compilation cache: both are what a warm cache holds."""
    return cache_root() / "sb3-templates"


def template_key(cfg: TrainConfig) -> str:
    """What decides a freshly built SB3 model's file, the seed aside."""
    import gymnasium as gym

    from engine.envs import families

    spec = gym.spec(families.vec_env_id(cfg.env))
    identity = {
        "format": FORMAT,
        "versions": {name: metadata.version(name) for name in PACKAGES},
        "algo": cfg.algo,
        "policy": cfg.policy,
        "env": cfg.env,
        "env_kwargs": dict(cfg.env_kwargs),
        "registered": [str(spec.entry_point), spec.kwargs, spec.max_episode_steps],
        "n_envs": cfg.n_envs,
        "hyperparameters": asdict(cfg.hyperparameters),
    }
    text = json.dumps(identity, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def template_path(cfg: TrainConfig) -> Path:
    return templates_dir() / f"{template_key(cfg)}.zip"


def keep_template(cfg: TrainConfig, model: Any) -> None:
    """Save ``model`` (freshly built by this run, its optimizer state set)
    as the template of ``cfg``'s settings, unless there is one."""
    path = template_path(cfg)
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.{os.getpid()}.zip")
    model.save(partial)
    os.replace(partial, path)  # whole or absent, as runs may start together


class FileModel:
    """What a ``jax`` run's trainer needs of an SB3 model (the step counts
    and ``save``) when a template spares it building one: it holds the
    compiled state's weights and Adam moments and writes them into a copy
    of the template, read once (a damaged template raises one of
    :data:`TEMPLATE_ERRORS` here)."""

    def __init__(self, template: Path, seed: int) -> None:
        self.template = template
        self.seed = seed
        self.num_timesteps = 0
        self._n_updates = 0
        self.params: Params | None = None
        self.adam: tuple[Params, Params, int] | None = None
        self._read = _Template.read(template)

    def hold(self, params: Params, adam: tuple[Params, Params, int]) -> None:
        self.params, self.adam = params, adam

    def save(self, path: str | os.PathLike[str] | IO[bytes]) -> None:
        if self.params is None or self.adam is None:
            raise ValueError("no weights to save yet")
        t = self._read
        changed = {
            "data": self._data(_named(t.entries)["data"]),
            "policy.pth": t.policy_file(self.params),
            "policy.optimizer.pth": t.optimizer_file(self.adam),
        }
        with zipfile.ZipFile(path, "w") as out:
            for info, body in t.entries:
                out.writestr(info, changed.get(info.filename, body))

    def _data(self, body: bytes) -> bytes:
        data = json.loads(body)
        data.update(
            num_timesteps=int(self.num_timesteps),
            _n_updates=int(self._n_updates),
            seed=int(self.seed),
        )
        # as SB3's save_util.data_to_json writes it
        return json.dumps(data, indent=4).encode()


def _named(entries: list[tuple[zipfile.ZipInfo, bytes]]) -> dict[str, bytes]:
    return {info.filename: body for info, body in entries}


# ------------------------------------------------- torch's tensor files


class _Storage(NamedTuple):
    key: str
    kind: str
    numel: int


class _Tensor(NamedTuple):
    storage: _Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(
    storage: _Storage, offset: int, shape: Any, stride: Any, *_: Any
) -> _Tensor:
    return _Tensor(storage, int(offset), tuple(shape), tuple(stride))


class _Reader(pickle.Unpickler):
    """Reads torch's ``data.pkl`` into :class:`_Tensor` records, knowing
    only the few names a state dict's pickle uses; anything else is not a
    file this module writes."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("torch", "FloatStorage"):
            return name
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in a tensor file")

    def persistent_load(self, pid: Any) -> _Storage:
        _, kind, key, _, numel = pid
        return _Storage(str(key), str(kind), int(numel))


class _TorchFile(NamedTuple):
    """A torch file read: its folder name, its entries, and its pickle
    (tensors as :class:`_Tensor` records)."""

    folder: str
    entries: list[tuple[zipfile.ZipInfo, bytes]]
    tree: Any

    @classmethod
    def read(cls, body: bytes) -> _TorchFile:
        with zipfile.ZipFile(io.BytesIO(body)) as z:
            entries = [(info, z.read(info)) for info in z.infolist()]
        folder = entries[0][0].filename.split("/", 1)[0]
        pickled = _named(entries)[f"{folder}/data.pkl"]
        return cls(folder, entries, _Reader(io.BytesIO(pickled)).load())

    def with_tensors(self, values: list[tuple[_Tensor, np.ndarray]]) -> bytes:
        """The file with each tensor's bytes from ``values``, which must
        cover every tensor in it, shapes as they are."""
        raw: dict[str, bytes] = {}
        for tensor, value in values:
            raw[f"{self.folder}/data/{tensor.storage.key}"] = _laid_out(tensor, value)
        stored = {i.filename for i, _ in self.entries if "/data/" in i.filename}
        if stored != set(raw):
            raise ValueError("the template's tensors and the values given differ")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
            for info, old in self.entries:
                content = raw.get(info.filename, old)
                fresh = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                if info.filename in raw:
                    fresh.extra = _padding(out.tell(), info.filename)
                z.writestr(fresh, content)
        return out.getvalue()


def _laid_out(tensor: _Tensor, value: np.ndarray) -> bytes:
    """``value``'s bytes in ``tensor``'s storage, element ``i`` at
    ``dot(i, stride)``: a tensor made from a transposed array keeps its
    column-major strides, and the file keeps them."""
    array = np.asarray(value, dtype="<f4")
    if array.shape != tensor.shape or tensor.offset != 0:
        raise ValueError(
            f"a tensor of shape {array.shape} for one of {tensor.shape} in the template"
        )
    if array.size != tensor.storage.numel:
        raise ValueError("a tensor shares its storage, which this does not write")
    storage = np.empty(array.size, dtype="<f4")
    itemsize = storage.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage, array.shape, [s * itemsize for s in tensor.stride]
    )
    view[...] = array
    return storage.tobytes()


def _padding(offset: int, name: str) -> bytes:
    """An extra field that puts an entry's data on :data:`ALIGNMENT`, as
    torch's writer does (its "FB" field)."""
    start = offset + 30 + len(name.encode()) + 4  # local header, name, field header
    pad = -start % ALIGNMENT
    return b"FB" + struct.pack("<H", pad) + b"Z" * pad


class _Template(NamedTuple):
    """A template read once: its entries, its two torch files, and the
    policy's parameter names in the state dict's order (``names``, which
    the optimizer's indices follow) and in
    :func:`~engine.rl.compiled.sb3.torch_layout`'s order (``layout``)."""

    entries: list[tuple[zipfile.ZipInfo, bytes]]
    policy: _TorchFile
    optimizer: _TorchFile
    names: list[str]
    layout: list[str]

    @classmethod
    def read(cls, path: Path) -> _Template:
        with zipfile.ZipFile(path) as template:
            entries = [(info, template.read(info)) for info in template.infolist()]
        named = _named(entries)
        policy = _TorchFile.read(named["policy.pth"])
        optimizer = _TorchFile.read(named["policy.optimizer.pth"])
        names = list(policy.tree)
        layout = [n for group in POLICY_GROUPS for n in names if n.startswith(group)]
        if sorted(layout) != sorted(names):
            raise ValueError(f"the template's policy has parameters {names}")
        if sorted(optimizer.tree["state"]) != list(range(len(names))):
            raise ValueError(
                "the template's optimizer state does not cover its parameters"
            )
        return cls(entries, policy, optimizer, names, layout)

    def _by_name(self, tree: Params) -> dict[str, np.ndarray]:
        return dict(zip(self.layout, torch_layout(tree), strict=True))

    def policy_file(self, params: Params) -> bytes:
        """``policy.pth`` with ``params``."""
        values = self._by_name(params)
        tensors = self.policy.tree
        return self.policy.with_tensors([(tensors[n], values[n]) for n in self.names])

    def optimizer_file(self, adam: tuple[Params, Params, int]) -> bytes:
        """``policy.optimizer.pth`` with the Adam moments and step count."""
        m, v, t = adam
        first, second = self._by_name(m), self._by_name(v)
        per_param = self.optimizer.tree["state"]
        values: list[tuple[_Tensor, np.ndarray]] = []
        for index, name in enumerate(self.names):
            moments = per_param[index]
            values += [
                (moments["step"], np.array(float(t), dtype=np.float32)),
                (moments["exp_avg"], first[name]),
                (moments["exp_avg_sq"], second[name]),
            ]
        return self.optimizer.with_tensors(values)
