"""dcmlir's own version, in a module of its own so any layer can read it without a cycle.

The stamp every artifact carries (records, plans, build-cache keys, benchmark
results) is :func:`dcmlir.ir.iree.versions`: this version and the IREE compiler's.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
