"""NEURON_CC_FLAGS editing: both flag spellings, other flags kept, values with spaces, bad\ninput refused with a message."""
from __future__ import annotations

import shlex

import pytest

from helpers.cache import flags as cache_flags

USER_FLAGS = "--model-type transformer --auto-cast=none -O1 --enable-saturate-infinity"


def test_split_understands_both_spellings():
    flags = cache_flags.split_flags("--cache_dir /a/b --log_level=INFO --retry_failed_compilation -O1 "
                           "--model-type transformer --enable-saturate-infinity --foo -1")
    assert [(f.name, f.value) for f in flags] == [
        ("--cache_dir", "/a/b"), ("--log_level", "INFO"), ("--retry_failed_compilation", None),
        ("-O1", None), ("--model-type", "transformer"), ("--enable-saturate-infinity", None),
        ("--foo", None), ("-1", None)]


def test_get_flag():
    flags = USER_FLAGS + " --cache_dir '/mnt/my cache' --retry_failed_compilation"
    assert cache_flags.get_flag(flags, "--cache_dir") == "/mnt/my cache"
    assert cache_flags.get_flag(flags, "--model-type") == "transformer"
    assert cache_flags.get_flag(flags, "--auto-cast") == "none"
    assert cache_flags.get_flag(flags, "--retry_failed_compilation") is True
    assert cache_flags.get_flag(flags, "--no_cache") is None
    assert cache_flags.get_flag("--log_level=INFO --log_level ERROR", "--log_level") == "ERROR"  # last wins
    assert cache_flags.get_flag(None, "--cache_dir") is None


def test_set_keeps_every_other_flag():
    out = cache_flags.set_flag(USER_FLAGS, "--cache_dir", "/mnt/my cache")
    assert shlex.split(out) == [*shlex.split(USER_FLAGS), "--cache_dir=/mnt/my cache"]
    assert cache_flags.get_flag(out, "--cache_dir") == "/mnt/my cache"
    again = cache_flags.set_flag(out, "--cache_dir", "/other")  # replaced, not piled up
    assert shlex.split(again) == [*shlex.split(USER_FLAGS), "--cache_dir=/other"]
    spaced = cache_flags.set_flag("--cache_dir /old " + USER_FLAGS, "--cache_dir", "/new")  # "--flag value"
    assert shlex.split(spaced) == [*shlex.split(USER_FLAGS), "--cache_dir=/new"]
    switch = cache_flags.set_flag(USER_FLAGS, "--retry_failed_compilation")
    assert switch == USER_FLAGS + " --retry_failed_compilation"
    assert cache_flags.set_flag(switch, "--retry_failed_compilation") == switch


def test_remove_takes_the_value_along():
    flags = "--model-type transformer --retry_failed_compilation --log_level INFO -O1"
    assert cache_flags.remove_flag(flags, "--model-type") == "--retry_failed_compilation --log_level INFO -O1"
    assert cache_flags.remove_flag(flags, "--log_level") == "--model-type transformer --retry_failed_compilation -O1"
    assert cache_flags.remove_flag(flags, "--retry_failed_compilation") == "--model-type transformer --log_level INFO -O1"
    assert cache_flags.set_flag(flags, "-O1", False) == "--model-type transformer --retry_failed_compilation --log_level INFO"
    assert cache_flags.remove_flag(flags, "--no_cache") == flags


def test_a_bare_flag_never_takes_the_next_flag_as_its_value():
    assert cache_flags.remove_flag("--verbose --no_cache -O1", "--verbose") == "--no_cache -O1"
    assert cache_flags.get_flag("--verbose --no_cache -O1", "--no_cache") is True
    assert cache_flags.get_flag("--cache_dir --no_cache", "--cache_dir") is True  # no value given
    assert cache_flags.get_flag("--verbose -1 -O1", "--verbose") == "-1"  # a number is a value
    assert cache_flags.get_flag("--log_level --retry_failed_compilation", "--retry_failed_compilation")


@pytest.mark.parametrize("flags", ["--cache_dir=", "--cache_dir", "--log_level --no_cache",
                                   "--model-type="])
def test_value_flags_without_a_value_are_refused_on_replace(flags):
    env = {"NEURON_CC_FLAGS": USER_FLAGS}
    with pytest.raises(cache_flags.FlagsError, match="has no value"):
        cache_flags.replace_env(flags, env=env)
    assert env["NEURON_CC_FLAGS"] == USER_FLAGS


def test_bad_input_is_refused_clearly():
    with pytest.raises(ValueError, match="check its quotes"):
        cache_flags.split_flags("--cache_dir '/unterminated")
    with pytest.raises(ValueError, match="needs a value"):
        cache_flags.set_flag("", "--cache_dir")
    with pytest.raises(ValueError, match="use one of WARNING, INFO, ERROR"):
        cache_flags.set_flag("", "--log_level", "LOUD")
    with pytest.raises(ValueError, match="expected e.g. '--cache_dir'"):
        cache_flags.set_flag("", "--cache_dir=/x", "/y")
    with pytest.raises(ValueError, match="empty value"):
        cache_flags.set_flag("", "--model-type", "")


def test_replace_env_on_a_given_environment():
    env = {"NEURON_CC_FLAGS": USER_FLAGS}
    change = cache_flags.replace_env(cache_flags.set_flag(USER_FLAGS, "--retry_failed_compilation"), env=env)
    assert change.changed and change.before == USER_FLAGS and change.note is None
    assert env["NEURON_CC_FLAGS"] == USER_FLAGS + " --retry_failed_compilation"
    assert "--retry_failed_compilation" in change.message()
    cache_flags.replace_env(cache_flags.remove_flag(env["NEURON_CC_FLAGS"], "--retry_failed_compilation"), env=env)
    assert env["NEURON_CC_FLAGS"] == USER_FLAGS
    empty = {"NEURON_CC_FLAGS": "--no_cache"}
    cache_flags.replace_env("", env=empty)
    assert "NEURON_CC_FLAGS" not in empty  # not left as an empty string
    with pytest.raises(ValueError):
        cache_flags.replace_env("--cache_dir 'oops", env=env)
    assert env["NEURON_CC_FLAGS"] == USER_FLAGS  # a refused edit loses nothing


def test_runtime_not_initialised_without_torch_xla_import():
    import sys

    if "torch_xla" in sys.modules:  # another test in this process imported it
        import torch_xla

        assert cache_flags.runtime_initialised() == bool(torch_xla._XLAC._xla_runtime_is_initialized())
    else:
        assert cache_flags.runtime_initialised() is False
        assert "torch_xla" not in sys.modules  # asking did not import it


@pytest.mark.parametrize("flags, phrase", [("--cache_dir=", "--cache_dir with no value"),
                                           ("--cache_dir '/x", "check its quotes")])
def test_setup_check_reports_unusable_flags_instead_of_raising(flags, phrase):
    from helpers.setup.environment_checks import check_compile_cache

    result = check_compile_cache({"NEURON_CC_FLAGS": flags}, stand_in=False)
    assert not result.ok and phrase in result.message and "NEURON_CC_FLAGS" in result.fix


def test_every_reader_of_the_variable_refuses_unbalanced_quotes_alike():
    from helpers.cache.location import locate_cache
    from helpers.inside.neuron_explorer import capture_env
    from mnist_mlp.common.compile_cache import cache_url
    from mnist_mlp.common.precision import with_auto_cast_none

    bad = "--cache_dir '/unterminated"
    readers = [lambda: cache_url({"NEURON_CC_FLAGS": bad}), lambda: locate_cache({"NEURON_CC_FLAGS": bad}),
               lambda: with_auto_cast_none(bad), lambda: capture_env("out", cc_flags=bad),
               lambda: cache_flags.replace_env(bad, env={})]
    for read in readers:
        with pytest.raises(cache_flags.FlagsError, match=r"NEURON_CC_FLAGS=.* cannot be split .*check its quotes"):
            read()
