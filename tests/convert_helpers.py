"""What the conversion tests share: the committed tiny checkpoints, Hugging
Face's outputs for them (made by fixtures/make_fixtures.py), and our ids
read back as the checkpoint's pieces."""

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_attention.data.tokenizers import END_ID, token_ids

FIXTURES = Path(__file__).parent / "convert" / "fixtures"


def reference(name):
    """`(reference.json as a dict, reference_logits.npz)` of fixture `name`."""
    folder = FIXTURES / name
    return (
        json.loads((folder / "reference.json").read_text("utf-8")),
        np.load(folder / "reference_logits.npz"),
    )


def as_pieces(tokenizer, ids):
    """Our ids, up to the end id, as the vocabulary's pieces."""
    pieces = []
    for i in np.asarray(ids).tolist():
        if i == END_ID:
            break
        if i != 0:
            pieces.append(tokenizer.vocabulary[i])
    return pieces


def source_ids(tokenizer, texts, max_length=512):
    return token_ids(tokenizer, tf.constant(texts), max_length)
