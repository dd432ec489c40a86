"""The Neuron persistent compile cache: find it, list it, clean it, share it, fill it (notebook
03 and the classroom tools).

    python -m helpers.cache ls|show|prune|export|import [--root DIR] [--dry-run] [--json]
"""

from mnist_mlp.common.exports import lazy_exports  # noqa: E402

# What the notebooks import from this package, each loaded from its module when first asked for.
__getattr__, __all__ = lazy_exports(__name__, {
    'location': ['fresh_cache', 'locate_cache'],
    'precompile': ['cache_diff'],
    'scan': ['scan_cache'],
    'render': ['render_scan', 'render_entry'],
    'widgets': ['CacheBrowser', 'FlagsEditor'],
    'demo': ['DEMO_ENTRIES', 'DEMO_VERSION', 'build_demo_cache'],
})
