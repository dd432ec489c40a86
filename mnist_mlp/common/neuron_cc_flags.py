"""NEURON_CC_FLAGS read and written in one place: the scripts, the compile notice and every
notebook tool parse it here, so bad input gets the same error everywhere.

The variable carries the cache wrapper's own flags (--cache_dir=<dir or s3:// URL>, --no_cache,
--retry_failed_compilation, --log_level=<LEVEL>) and compiler flags passed on to neuronx-cc
(--auto-cast=none, --model-type=transformer, -O1). It is split with shlex, as the wrapper splits
it; `--flag=value` and `--flag value` both count, and the last of a repeated flag wins.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

ENV_VAR = "NEURON_CC_FLAGS"
CACHE_DIR = "--cache_dir"
RETRY_FAILED = "--retry_failed_compilation"

# Flags that never take a value, so the token after them is left alone.
BOOLEAN_FLAGS = frozenset({"--no_cache", RETRY_FAILED, "--enable-saturate-infinity",
                           "--enable-mixed-precision-accumulation"})
# Flags that take a value, even a negative number (e.g. "--verbose -1"); a following token
# that is itself a flag is never taken as their value.
VALUE_FLAGS = frozenset({CACHE_DIR, "--log_level", "--auto-cast", "--auto-cast-type", "--model-type",
                         "--target", "--optlevel", "--distribution-strategy", "--logical-nc-config",
                         "--verbose", "--logfile"})
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
        raise FlagsError(f"{ENV_VAR}={flags!r} cannot be split ({err}): check its quotes, "
                         f"or unset it") from err
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
                     if f.name == CACHE_DIR else "")
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
    If a flag appears twice the last one wins, as with argparse."""
    _check_name(name)
    found: str | bool | None = None
    for f in split_flags(flags):
        if f.name == name:
            found = True if f.value is None else f.value
    return found


def compiler_flag(name: str, env=None) -> str | bool | None:
    """get_flag of env's NEURON_CC_FLAGS (os.environ by default)."""
    return get_flag((os.environ if env is None else env).get(ENV_VAR), name)


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
