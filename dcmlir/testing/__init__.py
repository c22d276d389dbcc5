"""Fakes shipped with the library, for tests and for trying new strategies without IREE.

As kernel_tuner ships its simulation runner: each fake is one role of
:mod:`dcmlir.driver.roles` (runner, measurer, records, cost model), passed in to
``dcmlir.tune`` or the search instead of patched into the modules that use the real
ones. The library never imports this package.
"""

from dcmlir.testing.fakes import (
    SMALL_MODEL_TREES,
    FakeMeasurer,
    FakeRunner,
    FullDiskDatabase,
    fake_seconds,
    keep_placement,
    keep_reports,
    quirk,
    small_cost_model,
)
from dcmlir.testing.replay import PassNoiseMeasurer, ReplayError, ReplayMeasurer, ReplayTable

__all__ = [
    "SMALL_MODEL_TREES",
    "FakeMeasurer",
    "FakeRunner",
    "FullDiskDatabase",
    "PassNoiseMeasurer",
    "ReplayError",
    "ReplayMeasurer",
    "ReplayTable",
    "fake_seconds",
    "keep_placement",
    "keep_reports",
    "quirk",
    "small_cost_model",
]
