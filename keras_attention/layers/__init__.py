"""Attention layers, each in its own file, named after the class."""

from keras_attention.layers._transformer import normalization_layer
from keras_attention.layers.bahdanau_attention import BahdanauAttention
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.luong_attention import LuongAttention
from keras_attention.layers.multi_head_cross_attention import MultiHeadCrossAttention
from keras_attention.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attention.layers.position_embedding import PositionEmbedding
from keras_attention.layers.positional_encoding import PositionalEncoding
from keras_attention.layers.relative_position_bias import RelativePositionBias
from keras_attention.layers.rotary_embedding import RotaryEmbedding
from keras_attention.layers.token_pooling import TokenPooling
from keras_attention.layers.transformer_block import TransformerBlock
from keras_attention.layers.transformer_decoder_block import TransformerDecoderBlock

__all__ = [
    "BahdanauAttention",
    "Dropout",
    "LuongAttention",
    "MultiHeadCrossAttention",
    "MultiHeadSelfAttention",
    "PositionEmbedding",
    "PositionalEncoding",
    "RelativePositionBias",
    "RotaryEmbedding",
    "TokenPooling",
    "TransformerBlock",
    "TransformerDecoderBlock",
    "normalization_layer",
]
