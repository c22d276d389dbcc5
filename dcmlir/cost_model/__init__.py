"""DietCode's cost model: ``time = work / (f_MK * pad * occ)``, ``f_MK`` fitted from records.

The modules follow the formula and the data flow: :mod:`~dcmlir.cost_model.terms`
(the exact ``work``, ``pad`` and ``occ`` arithmetic), :mod:`~dcmlir.cost_model.cherry_pick`
(where to measure a candidate), :mod:`~dcmlir.cost_model.adaptation` (``pad * occ``,
records and failures, shared by both models), :mod:`~dcmlir.cost_model.throughput`
(the models: ``f_MK`` learned, with the curve fitted by
:mod:`~dcmlir.cost_model.calibration`, or hashed) and :mod:`~dcmlir.cost_model.quality`
(how well they rank); ``python -m dcmlir.cost_model RECORDS`` prints the quality report.
Import from here: the split into modules is not part of the interface.
"""

from dcmlir.cost_model.cherry_pick import cherry_pick, cherry_pick_split
from dcmlir.cost_model.quality import (
    Predictor,
    QualityReport,
    ShapeScores,
    evaluate,
    prediction_error,
    rank_correlation,
    top1_regret,
)
from dcmlir.cost_model.terms import (
    HARD_CURVE,
    T4_PRIOR,
    OccupancyCurve,
    occupancy,
    pad,
    pad_tiles,
    parallel_units_for,
    tile_grid,
    work,
)
from dcmlir.cost_model.throughput import (
    DEFAULT_TILE_CHOICES,
    PRIOR_FLOPS,
    REGRESSOR_PARAMS,
    CostModel,
    TrivialCostModel,
)

__all__ = [
    "DEFAULT_TILE_CHOICES",
    "HARD_CURVE",
    "PRIOR_FLOPS",
    "REGRESSOR_PARAMS",
    "T4_PRIOR",
    "CostModel",
    "OccupancyCurve",
    "Predictor",
    "QualityReport",
    "ShapeScores",
    "TrivialCostModel",
    "cherry_pick",
    "cherry_pick_split",
    "evaluate",
    "occupancy",
    "pad",
    "pad_tiles",
    "parallel_units_for",
    "prediction_error",
    "rank_correlation",
    "tile_grid",
    "top1_regret",
    "work",
]
