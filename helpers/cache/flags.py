"""NEURON_CC_FLAGS applied to a notebook's environment (what FlagsEditor's Apply and notebook 03
do), and the parser they read it with (mnist_mlp.common.neuron_cc_flags, re-exported here).

The compiler wrapper reads the variable each time it compiles a graph, so a change applies to the
next graph compiled in that environment; graphs compiled (or cached) before keep the old flags.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from mnist_mlp.common.neuron_cc_flags import (  # noqa: F401  (the names notebook 03 reads them by)
    AUTO_CAST,
    ENV_VAR,
    LOG_LEVELS,
    MODEL_TYPES,
    FlagsError,
    get_flag,
    remove_flag,
    set_flag,
    split_flags,
    validate_flags,
)


def runtime_initialised() -> bool:
    """True when torch_xla's runtime is already up in this process.

    torch_xla is not imported just to ask: if it is not imported, it cannot be initialised.
    """
    if "torch_xla" not in sys.modules:
        return False
    try:
        import torch_xla

        return bool(torch_xla._XLAC._xla_runtime_is_initialized())
    except (AttributeError, ImportError):
        return False


ALREADY_COMPILED = ("torch_xla is already running in this process: the graphs it has compiled "
                    "so far (and any found in the cache) keep the flags they were compiled with; "
                    "the new flags apply to the next graph compiled with this environment. To "
                    "compile a graph again with them, run it in a new process (or restart the "
                    "kernel).")


@dataclass(frozen=True)
class FlagsChange:
    before: str
    after: str
    note: str | None  # set when graphs were already compiled in this process with the old flags

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def message(self) -> str:
        text = f"{ENV_VAR}={self.after!r}" if self.changed else f"{ENV_VAR} unchanged ({self.after!r})"
        return text + (f"\nNote: {self.note}" if self.note else "")


def replace_env(flags: str, env=None) -> FlagsChange:
    """Replace the whole of env[NEURON_CC_FLAGS] (os.environ by default), validated first (see
    validate_flags). When torch_xla already runs in this process the change carries a note:
    graphs compiled so far keep their flags."""
    env = os.environ if env is None else env
    validate_flags(flags)
    before, after = env.get(ENV_VAR, ""), flags.strip()
    if after:
        env[ENV_VAR] = after
    else:
        env.pop(ENV_VAR, None)
    note = (ALREADY_COMPILED if before != after and env is os.environ and runtime_initialised()
            else None)
    return FlagsChange(before, after, note)
