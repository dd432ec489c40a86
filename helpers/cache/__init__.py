"""The Neuron persistent compile cache: find it, list it, clean it, share it, fill it (notebook
03 and the classroom tools).

    python -m helpers.cache ls|show|prune|export|import [--root DIR] [--dry-run] [--json]

Modules: location (where the cache is), entry and scan (what is in it), plans and removal (what
cleanup removes, and removing it), archive and archive_import (export and import), render (text
views), units (sizes and times as people type them), command_line (`python -m helpers.cache`),
demo (a cache in every state, for notebook 03 and the tests), flags (NEURON_CC_FLAGS),
precompile (neuron_parallel_compile), cache_browser, flags_editor and widget_parts (the widgets
CacheBrowser and FlagsEditor, and what they share).

Imports: mnist_mlp, helpers.launch and helpers.show.
"""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'location': ['fresh_cache', 'locate_cache'],
    'precompile': ['cache_diff'],
    'scan': ['scan_cache'],
    'render': ['render_scan', 'render_entry'],
    'cache_browser': ['CacheBrowser'],
    'demo': ['DEMO_ENTRIES', 'DEMO_VERSION', 'build_demo_cache'],
    'flags_editor': ['FlagsEditor'],
})
