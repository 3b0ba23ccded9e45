"""What a python-kind env's process and the engine say to each other: plain
JSON, never pickle.

Values (observations, actions, rewards, info dicts, renders) are JSON with a
few tagged objects, ``{"__rls__": kind, ...}``:

* ``nd``: a numpy array, ``{"dtype", "shape", "data"}`` with the raw bytes
  in base64; ``np``: a numpy scalar, the same with shape ``[]``. Only bool,
  integer and float dtypes travel (an object array would need pickle);
* ``f``: a float JSON cannot write (``"nan"``, ``"inf"``, ``"-inf"``);
* ``tuple``: a tuple (observations of ``Tuple`` spaces stay tuples);
* ``dict``: a dict whose keys would be mistaken for a tag.

:func:`encode` never fails: what cannot travel (an object in an info dict,
a dict nested too deeply, an integer beyond 64 bits) is reduced to its
``repr``, shortened. :func:`parse_line` reads a line within
:mod:`engine.untrusted`'s limits and :func:`decode` checks every tag; both
raise :class:`ValueError` on anything malformed, so the engine can read what
a hostile env process sends.

Spaces travel as data (:func:`describe_space`, :func:`build_space`): Box,
Discrete, MultiDiscrete, MultiBinary, and Dict/Tuple of those.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

from engine.untrusted import MAX_DEPTH, MAX_INT

TAG = "__rls__"
MAX_ENCODE_DEPTH = 32
"""Deeper values are sent as their ``repr`` (below the reader's depth limit)."""
MAX_REPR_CHARS = 200
DTYPES = frozenset(
    (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
)
"""The array dtypes that travel (native byte order)."""
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# ---------------------------------------------------------------- values


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON (see the module docstring); never raises."""
    t = type(value)
    # The common types first, by exact type: this runs on every step.
    if t is np.ndarray:
        return _encode_array(value)
    if t is float:
        if value - value == 0.0:
            return value
        return {TAG: "f", "v": "nan" if math.isnan(value) else repr(value)}
    if t is bool or value is None:
        return value
    if t is int:
        return value if -MAX_INT <= value <= MAX_INT else _reduced(value)
    if t is str:
        return _text(value)
    if depth >= MAX_ENCODE_DEPTH:
        return _reduced(value)
    if t is tuple:
        return {TAG: "tuple", "items": [encode(v, depth + 1) for v in value]}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is dict:
        return _encode_dict(value, depth)
    # Subclasses (numpy scalars, OrderedDict, IntEnum, ...)
    if isinstance(value, np.ndarray | np.generic):
        return _encode_array(value)
    for base in _PLAIN:
        if isinstance(value, base):
            try:
                plain = base(value)
            except Exception:  # a subclass whose conversion fails
                return _reduced(value)
            return encode(plain, depth)
    return _reduced(value)


_PLAIN: tuple[Any, ...] = (bool, int, float, str, tuple, list, dict)


def _encode_dict(value: dict[Any, Any], depth: int) -> Any:
    if TAG in value or not all(type(k) is str for k in value):
        return {
            TAG: "dict",
            "items": [
                [_text(k) if isinstance(k, str) else _reduced(k), encode(v, depth + 1)]
                for k, v in value.items()
            ],
        }
    return {_text(k): encode(v, depth + 1) for k, v in value.items()}


_NAMES = {np.dtype(name): name for name in DTYPES}
_BY_NAME = {name: np.dtype(name) for name in DTYPES}


def _encode_array(value: np.ndarray[Any, Any] | np.generic) -> Any:
    arr = np.asarray(value)
    name = _NAMES.get(arr.dtype)
    if name is None:
        if arr.dtype.isnative or arr.dtype.newbyteorder("=") not in _NAMES:
            return _reduced(value)
        arr = arr.astype(arr.dtype.newbyteorder("="))
        name = _NAMES[arr.dtype]
    # tobytes() is C order whatever the strides.
    return {
        TAG: "nd" if type(value) is np.ndarray else "np",
        "dtype": name,
        "shape": list(arr.shape),
        "data": base64.b64encode(arr.tobytes()).decode("ascii"),
    }


def _text(s: str) -> str:
    if s.isascii():
        return s
    # Lone surrogates cannot be written as UTF-8; the reader would refuse
    # the whole line.
    return s.encode("utf-8", "replace").decode("utf-8")


def _reduced(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a user object whose repr fails
        text = f"<{type(value).__name__}>"
    if len(text) > MAX_REPR_CHARS:
        text = text[: MAX_REPR_CHARS - 3] + "..."
    return _text(text)


# ---------------------------------------------------------------- reading


def _parse_int(text: str) -> int:
    # Length first: int() of a 100,000-digit string is slow.
    if len(text) > 20 or not -MAX_INT <= (value := int(text)) <= MAX_INT:
        raise ValueError("an integer beyond 64 bits")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if value - value != 0.0:
        raise ValueError("a number too large to be finite")
    return value


def _parse_constant(text: str) -> Any:
    raise ValueError(f"{text}, which JSON does not allow")


def parse_line(line: bytes) -> Any:
    """One line from the other side, parsed and decoded (:func:`decode`),
    refused with :class:`ValueError` unless it is UTF-8 JSON within
    :mod:`engine.untrusted`'s limits: no NaN or Infinity, integers within
    64 bits, nesting at most :data:`~engine.untrusted.MAX_DEPTH` deep, text
    that is valid Unicode. (One pass instead of :func:`engine.untrusted.loads`
    and a second walk: this runs on every step.)"""
    try:
        data = json.loads(
            line.decode("utf-8"),
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON (column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    return decode(data)


def decode(value: Any, depth: int = 0) -> Any:
    """The value :func:`encode` sent (parsed JSON); :class:`ValueError` if
    malformed or nested deeper than :data:`~engine.untrusted.MAX_DEPTH`."""
    t = type(value)
    if t is str:
        return value if value.isascii() else _checked_text(value)
    if t is not list and t is not dict:
        return value
    if depth >= MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if t is list:
        return [decode(v, depth + 1) for v in value]
    kind = value.get(TAG)
    if kind is None:
        return {_checked_text(k): decode(v, depth + 1) for k, v in value.items()}
    if kind == "nd" or kind == "np":
        arr = decode_array(value)
        return arr[()] if kind == "np" else arr
    if kind == "f":
        if value.get("v") not in _FLOATS:
            raise ValueError("an unknown float")
        return _FLOATS[value["v"]]
    items = value.get("items")
    if type(items) is not list:
        raise ValueError(f"a {str(kind)[:20]!r} value without items")
    if kind == "tuple":
        return tuple([decode(v, depth + 1) for v in items])
    if kind == "dict":
        out = {}
        for item in items:
            if not (type(item) is list and len(item) == 2 and type(item[0]) is str):
                raise ValueError("a dict item that is not a pair")
            out[_checked_text(item[0])] = decode(item[1], depth + 1)
        return out
    raise ValueError(f"an unknown tag {str(kind)[:20]!r}")


def _checked_text(s: str) -> str:
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text that is not valid Unicode") from None
    return s


def decode_array(value: Any) -> np.ndarray[Any, Any]:
    """An array sent as ``{"dtype", "shape", "data"}``; the byte count must
    match the shape, so a claimed shape cannot allocate more than was sent."""
    if not isinstance(value, dict):
        raise ValueError("an array that is not an object")
    dt = _BY_NAME.get(value.get("dtype"))  # type: ignore[arg-type]
    shape, data = value.get("shape"), value.get("data")
    if dt is None:
        raise ValueError(f"an array of dtype {str(value.get('dtype'))[:20]!r}")
    if not (
        type(shape) is list
        and len(shape) <= 32
        and all(type(n) is int and n >= 0 for n in shape)
    ):
        raise ValueError("an array with a malformed shape")
    if type(data) is not str:
        raise ValueError("an array without data")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise ValueError("an array whose data is not base64") from None
    if math.prod(shape) * dt.itemsize != len(raw):
        raise ValueError(f"an array of shape {shape} with {len(raw)} bytes")
    return np.frombuffer(bytearray(raw), dtype=dt).reshape(shape)


# ---------------------------------------------------------------- spaces


class UnsupportedSpaceError(ValueError):
    """A space that cannot travel as data; the message names it."""


ARRAY_SPACES = {"Box": ("low", "high"), "MultiDiscrete": ("nvec", "start")}
"""The spaces made of arrays and a dtype: the gymnasium class's name, and
its constructor's array arguments (attributes of the same names)."""


def describe_space(space: Any) -> dict[str, Any]:
    """A gymnasium space as JSON data (:func:`build_space` makes it again)."""
    from gymnasium import spaces

    for kind, arrays in ARRAY_SPACES.items():
        if isinstance(space, getattr(spaces, kind)):
            return {
                "type": kind,
                **{name: _encode_array(getattr(space, name)) for name in arrays},
                "dtype": np.dtype(space.dtype).name,
            }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiBinary):
        n = space.n
        return {
            "type": "MultiBinary",
            "n": int(n) if isinstance(n, int | np.integer) else [int(x) for x in n],
        }
    if isinstance(space, spaces.Dict):
        return {
            "type": "Dict",
            "spaces": [[str(k), describe_space(s)] for k, s in space.spaces.items()],
        }
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [describe_space(s) for s in space.spaces]}
    raise UnsupportedSpaceError(
        f"a {type(space).__name__} space cannot cross to the env process (Box, "
        "Discrete, MultiDiscrete, MultiBinary and Dict/Tuple of those can)"
    )


def build_space(desc: Any) -> Any:
    """The gymnasium space :func:`describe_space` described, once
    :func:`decode` has read it (arrays are arrays); ValueError if the
    description is malformed."""
    from gymnasium import spaces

    if not isinstance(desc, dict):
        raise ValueError("a space that is not an object")
    kind = desc.get("type")
    try:
        if kind in ARRAY_SPACES:
            arrays = {name: _array(desc.get(name)) for name in ARRAY_SPACES[kind]}
            return getattr(spaces, kind)(**arrays, dtype=_dtype(desc.get("dtype")))
        if kind == "Discrete":
            return spaces.Discrete(_int(desc.get("n")), start=_int(desc.get("start")))
        if kind == "MultiBinary":
            n = desc.get("n")
            return spaces.MultiBinary(
                [_int(x) for x in n] if isinstance(n, list) else _int(n)
            )
        if kind == "Dict":
            pairs = desc.get("spaces")
            if not isinstance(pairs, list):
                raise ValueError("a Dict space without spaces")
            return spaces.Dict({str(k): build_space(s) for k, s in _pairs(pairs)})
        if kind == "Tuple":
            items = desc.get("spaces")
            if not isinstance(items, list):
                raise ValueError("a Tuple space without spaces")
            return spaces.Tuple([build_space(s) for s in items])
    except (TypeError, AssertionError) as exc:
        # gymnasium's own checks of the arguments
        raise ValueError(f"a {kind} space gymnasium refuses ({exc})") from None
    raise ValueError(f"an unknown space type {str(kind)[:20]!r}")


def _array(value: Any) -> np.ndarray[Any, Any]:
    if not isinstance(value, np.ndarray):
        raise ValueError("a space bound that is not an array")
    return value


def _pairs(items: list[Any]) -> list[tuple[Any, Any]]:
    if not all(isinstance(p, list) and len(p) == 2 for p in items):
        raise ValueError("a Dict space item that is not a pair")
    return [(p[0], p[1]) for p in items]


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"a space size that is not a whole number ({value!r:.20})")
    return value


def _dtype(value: Any) -> np.dtype[Any]:
    if value not in DTYPES:
        raise ValueError(f"a space of dtype {str(value)[:20]!r}")
    dtype: np.dtype[Any] = np.dtype(value)
    return dtype
