"""The Neuron persistent compile cache: find it, list it, clean it, share it, fill it.

    python -m helpers.cache ls|show|prune|export|import [--root DIR] [--dry-run] [--json]

location (where the cache is), entry + scan (what is in it), plans (what cleanup removes),
archive (export/import), render (text views), cli, demo (a cache in every state, for notebook
03 and the tests), flags (NEURON_CC_FLAGS), precompile (neuron_parallel_compile), widgets.
"""
