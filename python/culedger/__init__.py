"""culedger: where GPU memory went. ``with culedger.tag("kv_pool"):`` attributes the CUDA
allocations made inside the block, on this thread, to a category (see docs/categories.md)."""
from ._tags import tag

__all__ = ["tag"]
