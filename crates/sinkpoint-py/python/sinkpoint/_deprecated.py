"""The 0.1 names a module still answers, each the same object as its new name, with a ``DeprecationWarning``."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Mapping


def deprecated_names(module: str, names: Mapping[str, str], namespace: Dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module``: an old name of ``names`` (old → new) warns and returns
    ``namespace[new]``; any other name is an ``AttributeError``."""

    def getattr_(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated: use {module}.{new} (the same class)", DeprecationWarning, stacklevel=2
        )
        return namespace[new]

    getattr_.__doc__ = f"The 0.1 names of {module}, with a ``DeprecationWarning`` naming the new one."
    return getattr_
