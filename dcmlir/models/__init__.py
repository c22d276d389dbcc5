"""Whole-model sources: a generated BERT-style encoder (no torch) and the PyTorch importer."""

from dcmlir.models.bert import (
    BERT_BASE,
    DEFAULT_RTOL,
    EncoderConfig,
    GeneratedModel,
    encoder_reference,
    generate_encoder,
    make_weights,
    random_input,
    save_model,
    verify_encoder,
    weight_shapes,
)

__all__ = [
    "BERT_BASE",
    "DEFAULT_RTOL",
    "EncoderConfig",
    "GeneratedModel",
    "encoder_reference",
    "generate_encoder",
    "make_weights",
    "random_input",
    "save_model",
    "verify_encoder",
    "weight_shapes",
]
