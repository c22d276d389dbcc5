"""The doors to MLIR and IREE: the bindings, the compiler tool and runtime, diagnostics,
reading input files, and the pass and pipeline machinery `dcmlir-opt` runs.

Nothing else in dcmlir imports ``iree.*`` directly: :mod:`dcmlir.ir.mlir` holds the
MLIR bindings bundled with ``iree-base-compiler``, :mod:`dcmlir.ir.iree` the rest.
"""
