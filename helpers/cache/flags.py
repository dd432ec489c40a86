"""Read and edit NEURON_CC_FLAGS without clobbering the flags the user already set.

NEURON_CC_FLAGS carries two kinds of flags in one string:
- the cache wrapper's own (it reads them, the compiler never sees them): --cache_dir=<dir or
  s3:// URL>, --no_cache, --retry_failed_compilation, --log_level=<LEVEL>;
- compiler flags passed on to neuronx-cc, e.g. --auto-cast=none, --model-type=transformer, -O1.

Flags are split with shlex; both `--flag=value` and `--flag value` are understood. The compiler
wrapper reads the variable each time it compiles a graph, so a change applies to the next graph
compiled in that environment; graphs compiled (or cached) before keep the old flags.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass

ENV_VAR = "NEURON_CC_FLAGS"

# Flags that never take a value, so the token after them is left alone.
BOOLEAN_FLAGS = frozenset({
    "--no_cache",
    "--retry_failed_compilation",
    "--enable-saturate-infinity",
    "--enable-mixed-precision-accumulation",
})
# Flags that take a value, even a negative number (e.g. "--verbose -1"); a following token
# that is itself a flag is never taken as their value.
VALUE_FLAGS = frozenset({
    "--cache_dir",
    "--log_level",
    "--auto-cast",
    "--auto-cast-type",
    "--model-type",
    "--target",
    "--optlevel",
    "--distribution-strategy",
    "--logical-nc-config",
    "--verbose",
    "--logfile",
})
AUTO_CAST = ("none", "matmult", "all")
MODEL_TYPES = ("generic", "transformer", "unet-inference")
LOG_LEVELS = ("WARNING", "INFO", "ERROR")
_NUMBER = re.compile(r"-\d+(\.\d+)?")


class FlagsError(ValueError):
    """NEURON_CC_FLAGS (or an edit of it) that cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class Flag:
    """One flag as written: its name, its value (None for a switch) and its tokens."""
    name: str
    value: str | None
    tokens: tuple[str, ...]


def split_flags(flags: str | None) -> list[Flag]:
    """NEURON_CC_FLAGS text -> flags in order. Raises FlagsError on unbalanced quotes."""
    try:
        tokens = shlex.split(flags or "")
    except ValueError as err:
        raise FlagsError(f"{ENV_VAR}={flags!r} cannot be split ({err}): check its quotes") from err
    out: list[Flag] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-") and "=" in tok:
            name, value = tok.split("=", 1)
            out.append(Flag(name, value, (tok,)))
            i += 1
            continue
        if tok.startswith("-") and tok not in BOOLEAN_FLAGS and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if not nxt.startswith("-") or (tok in VALUE_FLAGS and _NUMBER.fullmatch(nxt)):
                out.append(Flag(tok, nxt, (tok, nxt)))
                i += 2
                continue
        # A switch, a value flag missing its value, or a stray word: kept as it is.
        out.append(Flag(tok, None, (tok,)))
        i += 1
    return out


def validate_flags(flags: str | None) -> list[Flag]:
    """split_flags, refusing a flag that needs a value but has none (e.g. `--cache_dir=`)."""
    out = split_flags(flags)
    for f in out:
        if f.name in VALUE_FLAGS and not f.value:
            extra = (" (an empty --cache_dir does not mean the default cache)"
                     if f.name == "--cache_dir" else "")
            raise FlagsError(f"{ENV_VAR}: {f.name} has no value{extra}: write {f.name}=<value>, "
                             "or remove it")
    return out


def join_flags(flags: list[Flag]) -> str:
    return shlex.join([t for f in flags for t in f.tokens])


def _check_name(name: str) -> None:
    if not name.startswith("-") or "=" in name or " " in name:
        raise FlagsError(f"flag name {name!r}: expected e.g. '--cache_dir' (no '=' or value)")


def get_flag(flags: str | None, name: str) -> str | bool | None:
    """The value of `name` in `flags`: its value, True for a switch, None when absent.

    If a flag appears twice the last one wins, as with argparse.
    """
    _check_name(name)
    found: str | bool | None = None
    for f in split_flags(flags):
        if f.name == name:
            found = True if f.value is None else f.value
    return found


def remove_flag(flags: str | None, name: str) -> str:
    """`flags` without any occurrence of `name` (and its value); other flags untouched."""
    _check_name(name)
    return join_flags([f for f in split_flags(flags) if f.name != name])


def set_flag(flags: str | None, name: str, value: str | bool | None = True) -> str:
    """`flags` with `name` set once: `--name=value`, or `--name` for value True/None.

    value False removes it. Earlier occurrences are dropped, so repeating a call does not
    pile up duplicates; the flag goes to the end.
    """
    _check_name(name)
    if value is False:
        return remove_flag(flags, name)
    kept = [f for f in split_flags(flags) if f.name != name]
    if value is True or value is None:
        if name in VALUE_FLAGS:
            raise FlagsError(f"{name} needs a value, e.g. {name}=<value>")
        kept.append(Flag(name, None, (name,)))
    else:
        value = str(value)
        if not value:
            raise FlagsError(f"{name}: empty value; pass False to remove the flag")
        if name == "--log_level" and value.upper() not in LOG_LEVELS:
            raise FlagsError(f"--log_level={value}: use one of {', '.join(LOG_LEVELS)}")
        kept.append(Flag(name, value, (f"{name}={value}",)))
    return join_flags(kept)


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
