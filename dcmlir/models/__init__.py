"""Whole-model sources: a generated BERT-style encoder (no torch) and the PyTorch importer.

The encoder's pieces in data-flow order: :mod:`~dcmlir.models.bert` (config, seeded
weights, files), :mod:`~dcmlir.models.bert_linalg` (the module text) and
:mod:`~dcmlir.models.bert_reference` (the numpy yardstick and the check). The importer,
:mod:`dcmlir.models.torch_import`, needs the ``torch`` extra, so it is not loaded here.
"""

from dcmlir.models.bert import (
    BERT_BASE,
    PARAMETER_SCOPE,
    WEIGHT_LAYOUTS,
    WEIGHT_MODES,
    EncoderConfig,
    GeneratedModel,
    make_weights,
    parameters_path_for,
    save_model,
    weight_shapes,
)
from dcmlir.models.bert_linalg import generate_encoder
from dcmlir.models.bert_reference import (
    DEFAULT_RTOL,
    encoder_reference,
    random_input,
    verify_encoder,
)

__all__ = [
    "BERT_BASE",
    "DEFAULT_RTOL",
    "PARAMETER_SCOPE",
    "WEIGHT_LAYOUTS",
    "WEIGHT_MODES",
    "EncoderConfig",
    "GeneratedModel",
    "encoder_reference",
    "generate_encoder",
    "make_weights",
    "parameters_path_for",
    "random_input",
    "save_model",
    "verify_encoder",
    "weight_shapes",
]
