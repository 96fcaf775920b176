"""culedger: where every byte of GPU memory went.

The wheel bundles the interposer ``libculedger.so`` next to this file and installs the
``culedger`` command line. ``python -m culedger ARGS`` runs that command line;
``python -m culedger --library-path`` prints the interposer's path, e.g. for
``LD_PRELOAD=$(python -m culedger --library-path)`` in a container entrypoint.
``with culedger.tag("kv_pool"):`` attributes the CUDA allocations made inside the block, on
this thread, to a category (see docs/categories.md).
"""

import os as _os

from ._tags import tag

__all__ = ["__version__", "library_path", "tag"]

_LIBRARY = "libculedger.so"


def _installed_version():
    # One source of truth: the wheel's metadata, which maturin takes from Cargo.toml.
    try:
        from importlib.metadata import version

        return version("culedger")
    except Exception:
        return "0+unknown"


__version__ = _installed_version()


def library_path():
    """Absolute path of the bundled ``libculedger.so`` (raises FileNotFoundError if absent)."""
    path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), _LIBRARY)
    if not _os.path.isfile(path):
        raise FileNotFoundError(f"{path}: the culedger interposer is not installed next to the package")
    return path
