"""Model builders (installed as `keras_attention.models`): plain functions
that return uncompiled `keras.Model`s, each with named presets."""

from keras_attention.models.seq2seq_attention import (
    Seq2SeqAttention,
    build_seq2seq_attention,
)
from keras_attention.models.transformer import Transformer, build_transformer
from keras_attention.models.transformer_classifier import (
    TransformerClassifier,
    build_transformer_classifier,
)
from keras_attention.models.transformer_embedder import (
    TransformerEmbedder,
    build_transformer_embedder,
)
from keras_attention.models.transformer_lm import TransformerLM, build_transformer_lm

__all__ = [
    "Seq2SeqAttention",
    "Transformer",
    "TransformerClassifier",
    "TransformerEmbedder",
    "TransformerLM",
    "build_seq2seq_attention",
    "build_transformer",
    "build_transformer_classifier",
    "build_transformer_embedder",
    "build_transformer_lm",
]
