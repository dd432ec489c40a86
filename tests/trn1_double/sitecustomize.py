"""Run at the start of every Python process on the double (its site directory is on PYTHONPATH).

The debug variables XLA_IR_DEBUG/XLA_HLO_DEBUG: torch-xla folds them into its graph hash, but on
Neuron a NEFF cached without their metadata is read again (docs/sources.md, "The debug variables
... and cached NEFFs"), so the double's cache key, torch-xla's hash, must not see them. They are
kept from torch-xla before it can read them, and recorded for the compile cache
(trn1_platform.compile_cache.debug_requested).
"""
import os

asked = [os.environ.pop(name, "") for name in ("XLA_IR_DEBUG", "XLA_HLO_DEBUG")]  # both go
if any(value not in ("", "0") for value in asked):
    os.environ["TRN1_DOUBLE_DEBUG_METADATA"] = "1"
