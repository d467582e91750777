"""Resolving ``serializer.class`` / ``partitioner.class`` values to Python objects.

A value is either one of 0.7's Java class names (``kafka.serializer.StringEncoder``), mapped to
our equivalent by the caller's alias table, or a dotted Python name ``package.module.attr``.
A class is instantiated with no arguments (0.7 builds them with ``Utils.getObject``, the same);
anything else (a function, an instance) is used as it is.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def resolve(name: str, aliases: Mapping[str, Any]) -> Any:
    """The object ``name`` stands for: an alias's value, or the import of a dotted name.

    Raises ValueError when the name is not dotted, its module does not import, or the module
    has no such attribute.
    """
    if name in aliases:
        target = aliases[name]
    else:
        module_name, dot, attribute = name.rpartition(".")
        if not dot or not module_name:
            raise ValueError(f"{name!r} is not a dotted name (package.module.attribute)")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"{name!r}: cannot import {module_name}: {exc}") from None
        try:
            target = getattr(module, attribute)
        except AttributeError:
            raise ValueError(f"{name!r}: {module_name} has no attribute {attribute}") from None
    return target() if isinstance(target, type) else target
