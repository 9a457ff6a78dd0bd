"""`python -m keras_attention`: build a tiny Transformer from the layers,
print its summary, and show one attention map's shape.

The full main job (train, export, translate, draw) arrives with the recipes.
"""

import keras
import numpy as np

from keras_attention.layers import (
    PositionalEncoding,
    TransformerBlock,
    TransformerDecoderBlock,
)


def build_tiny_transformer(vocabulary_size=32, model_dim=32, num_heads=4):
    source_ids = keras.Input((None,), dtype="int32", name="source_ids")
    target_ids = keras.Input((None,), dtype="int32", name="target_ids")
    embedding = keras.layers.Embedding(vocabulary_size, model_dim, mask_zero=True)
    positions = PositionalEncoding()
    encoder_output = TransformerBlock(num_heads, 4 * model_dim)(positions(embedding(source_ids)))
    decoder_output = TransformerDecoderBlock(num_heads, 4 * model_dim)(
        positions(embedding(target_ids)), encoder_output
    )
    logits = keras.layers.Dense(vocabulary_size, name="logits")(decoder_output)
    return keras.Model({"source_ids": source_ids, "target_ids": target_ids}, logits)


def main():
    model = build_tiny_transformer()
    model.summary()
    batch = {
        "source_ids": np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32"),
        "target_ids": np.array([[1, 5, 6], [1, 8, 0]], "int32"),
    }
    print("logits:", tuple(model(batch).shape), "= [batch, target length, vocabulary]")


if __name__ == "__main__":
    main()
