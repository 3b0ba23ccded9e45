"""Read the pickles inside stable-baselines3 files without running their code.

An SB3 ``.zip`` keeps most of its ``data`` entry as JSON, but the policy
class, its keyword arguments, the spaces, schedules and buffer classes are
cloudpickles, and ``vecnormalize.pkl`` is a pickle of the whole wrapper.
Unpickling any of them with :mod:`pickle` can call any function in any module
(``os.system`` is one opcode away). :func:`loads` is an unpickler that only
knows a fixed list of names:

* **built**: numpy arrays, scalars and dtypes, numpy random generators,
  Gymnasium spaces, and the running mean/std records of ``VecNormalize``
  (read into plain :class:`Record` objects, not the wrapper);
* **referenced only**: policy classes of stable-baselines3 and sb3-contrib,
  torch activation and optimizer classes, SB3 feature extractors: they may be
  named (the policy is built from them later) but the pickle may not call
  them or change them.

Anything else is refused with :class:`UnsafePickle`, before it is imported.
"""

from __future__ import annotations

import copyreg
import importlib
import io
import pickle
from collections.abc import Callable
from typing import Any, ClassVar

from engine.errors import EngineError


class UnsafePickle(EngineError):
    """The pickle names something outside the allowed list."""


class Record:
    """What a ``VecNormalize`` or ``RunningMeanStd`` pickle held, as plain
    attributes (the wrapper itself is never rebuilt from a file)."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise UnsafePickle("A normalization record holds no attributes.")
        self.__dict__.update(state)


# (module, name) that the pickle may build (call or instantiate).
_BUILT: frozenset[tuple[str, str]] = frozenset(
    {
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__randomstate_ctor"),
        ("numpy.random._pcg64", "PCG64"),
        ("numpy.random._pcg64", "PCG64DXSM"),
        ("numpy.random._mt19937", "MT19937"),
        ("numpy.random._philox", "Philox"),
        ("numpy.random._sfc64", "SFC64"),
        ("numpy.random._generator", "Generator"),
        ("numpy.random.bit_generator", "SeedSequence"),
        ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
        ("gymnasium.spaces.box", "Box"),
        ("gymnasium.spaces.discrete", "Discrete"),
        ("gymnasium.spaces.multi_discrete", "MultiDiscrete"),
        ("gymnasium.spaces.multi_binary", "MultiBinary"),
        ("gymnasium.spaces.dict", "Dict"),
        ("gymnasium.spaces.tuple", "Tuple"),
        ("collections", "OrderedDict"),
        ("copyreg", "_reconstructor"),
        ("builtins", "object"),
    }
)
_RECORDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize"),
        ("stable_baselines3.common.running_mean_std", "RunningMeanStd"),
    }
)
_REFERENCED_MODULES = (
    "stable_baselines3.",
    "sb3_contrib.",
    "torch.nn.",
    "torch.optim.",
)


def _referenced_ok(obj: Any) -> bool:
    """A class a policy may be built from (never called by the pickle)."""
    if not isinstance(obj, type):
        return False
    import torch
    from stable_baselines3.common.policies import BasePolicy
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    allowed = (
        BasePolicy,
        BaseFeaturesExtractor,
        torch.nn.Module,
        torch.optim.Optimizer,
    )
    return issubclass(obj, allowed)


# The pure-Python unpickler (typeshed does not describe it), so that calls and
# attribute setting can be checked opcode by opcode.
_PyUnpickler: Any = pickle._Unpickler
_RECONSTRUCTOR: Any = copyreg.__dict__["_reconstructor"]


class _Unpickler(_PyUnpickler):  # type: ignore[misc]
    dispatch: ClassVar[dict[int, Callable[..., None]]] = dict(_PyUnpickler.dispatch)

    def __init__(self, data: bytes, what: str) -> None:
        super().__init__(io.BytesIO(data))
        self.what = what
        self.built: set[int] = set()

    def _refuse(self, name: str) -> UnsafePickle:
        return UnsafePickle(
            f"{self.what} refers to {name}, which a policy file has no reason to "
            "hold; it was not loaded, so none of its code ran."
        )

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        if key in _RECORDS:
            return Record
        if key in _BUILT:
            obj = getattr(importlib.import_module(module), name)
            self.built.add(id(obj))
            return obj
        if module.startswith(_REFERENCED_MODULES) and "." not in name:
            obj = getattr(importlib.import_module(module), name, None)
            if _referenced_ok(obj):
                return obj
        raise self._refuse(f"{module}.{name}")

    def _callable(self, func: Any) -> None:
        if id(func) not in self.built and func is not Record:
            raise self._refuse(f"a call of {getattr(func, '__name__', func)!r}")

    def load_reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        self._callable(func)
        if func is _RECONSTRUCTOR and not (
            len(args) == 3
            and (args[0] is Record or id(args[0]) in self.built)
            and args[1] is object
        ):
            raise self._refuse(f"a copy of {args[0]!r}")
        self.stack[-1] = func(*args)

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        self._callable(cls)
        self.append(cls.__new__(cls, *args))

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        self._callable(cls)
        self.append(cls.__new__(cls, *args, **kwargs))

    def load_build(self) -> None:
        # BUILD sets attributes on the object below its state: fine on data
        # the pickle built, never on a class or function it named.
        if callable(self.stack[-2]):
            raise self._refuse(f"a change to {self.stack[-2]!r}")
        state = self.stack[-1]
        parts = state if isinstance(state, tuple) else (state,)
        for part in parts:
            if isinstance(part, dict) and any(
                not isinstance(k, str) or k.startswith("__") for k in part
            ):
                raise self._refuse("a change to an object's class or internals")
        super().load_build()

    def load_inst(self) -> None:
        raise self._refuse("an old-style instance")

    def load_obj(self) -> None:
        raise self._refuse("an old-style instance")

    def persistent_load(self, pid: Any) -> Any:
        raise self._refuse("a persistent id")

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.INST[0]] = load_inst
    dispatch[pickle.OBJ[0]] = load_obj


def loads(data: bytes, what: str) -> Any:
    """Unpickle ``data`` with the allowed names only; ``what`` names it in
    the error (``"The policy class of model.zip"``)."""
    try:
        return _Unpickler(data, what).load()
    except UnsafePickle:
        raise
    except Exception as exc:
        raise EngineError(
            f"{what} cannot be read ({type(exc).__name__}: {exc})."
        ) from None
