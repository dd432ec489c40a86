"""A package's names, each imported from its module only when first asked for.

`from helpers.cache import CacheBrowser` then reads as one place per package for a notebook,
while importing the package itself stays cheap and changes nothing (no torch_xla loaded before
a notebook's setup() has picked the backend).
"""
from __future__ import annotations

import importlib


def lazy_exports(package: str, modules: dict[str, list[str]]):
    """A module-level __getattr__ for `package`: modules maps each of its submodules to the
    names it provides."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__, sorted(where)
