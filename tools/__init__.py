"""Command-line entry points: ``dcmlir-opt`` and ``dcmlir``."""
