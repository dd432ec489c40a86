"""The XLA device of this pytest process (the CPU stand-in), shared by the tests that run XLA
in-process instead of starting a Python process for it (each such process spends about 5 s of
CPU importing torch_xla before it does anything). Importing this module starts nothing.

Every test module that uses it calls `DEVICE = stand_in_device()` at its top, so the device
starts at collection, before any test of this process runs a CPU backward: the autograd engine
sizes its per-device queues on first use and counts no XLA device until the runtime is up; a
backward on it afterwards fails an internal assert.

One runtime for the whole session also means one in-memory graph cache: a test that counts the
graphs its steps compile uses an input shape no other test uses (its own batch size, named at
the test), so that no other test's graph is already there. Counters are read as differences
(helpers.inside.lazy_metrics), never as totals of the process.
"""
import functools
import os


@functools.cache
def stand_in_device():
    """Start the stand-in's XLA runtime in this process (the first call) and return its device."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")  # read by torch_xla when its runtime starts
    import torch_xla

    return torch_xla.device()
