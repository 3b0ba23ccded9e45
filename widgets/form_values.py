"""Values typed into form fields, parsed and checked against their schema
(the dicts :mod:`widgets.param_form` describes), each problem one sentence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ERROR_STYLE = "border: 1px solid #d62728;"
INT64_MAX = 2**63 - 1
"""Largest whole number a field takes (the engine refuses larger ones)."""


def check_value(schema: Mapping[str, Any], text: str) -> tuple[Any, str]:
    """Parse ``text`` for ``schema``: ``(value, "")`` or ``(None, error sentence)``."""
    kind = schema.get("type", "str")
    title = schema.get("title") or schema["name"]
    text = text.strip()
    if text == "":
        if schema.get("optional"):
            return None, ""
        if kind in ("str", "path"):
            return "", ""
        return None, f"{title} needs a value."
    if kind == "int":
        try:
            value: Any = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            return None, f"{title} must be a whole number."
        if abs(value) > INT64_MAX:  # JSON readers refuse more than 64 bits
            return None, f"{title} must be a whole number of at most 19 digits."
    elif kind == "float":
        try:
            value = float(text)
        except ValueError:
            return None, f"{title} must be a number."
        if value != value or value in (float("inf"), float("-inf")):
            return None, f"{title} must be a finite number."
    elif kind == "int_list":
        try:
            items = [int(p) for p in text.strip("[]").split(",") if p.strip()]
        except ValueError:
            return None, f"{title} must be whole numbers separated by commas."
        for item in items:
            one = {**schema, "type": "int", "title": title}
            _, problem = check_value(one, str(item))
            if problem:
                return None, problem.replace(title, f"Each number of {title}", 1)
        return items, ""
    else:
        value = text
    if kind in ("int", "float"):
        lo, hi = schema.get("min"), schema.get("max")
        if lo is not None:
            if schema.get("exclusive_min") and value <= lo:
                return None, f"{title} must be greater than {lo}."
            if value < lo:
                return None, f"{title} must be at least {lo}."
        if hi is not None:
            if schema.get("exclusive_max") and value >= hi:
                return None, f"{title} must be less than {hi}."
            if value > hi:
                return None, f"{title} must be at most {hi}."
    return value, ""
