"""The Python API: load a module's workloads, tune them, compile with the plan.
"""

from dcmlir.driver.tuner import compile, tune

__all__ = ["compile", "tune"]
