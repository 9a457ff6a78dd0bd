"""`python -m keras_attention`: a one-minute tour of the zoo.

Builds a tiny Transformer, trains it to reverse short digit strings (data
made on the spot), decodes a few inputs with greedy and beam search, and
draws the cross-attention map: each output digit attends to its mirror
position, an anti-diagonal.

The full main job (a real data set, recipes, SavedModel export) arrives
with the recipes.
"""

import argparse
from pathlib import Path

import keras
import numpy as np

from keras_attention import decoding, visualize
from keras_attention.models import build_transformer

# Ids: 0 padding, 1 start, 2 end, 3..12 the digits 0..9.
DIGITS = 3
VOCABULARY = ["<pad>", "<s>", "</s>"] + [str(d) for d in range(10)]


def reversal_data(count, rng, max_digits=8):
    """Source: digits; target: the same digits reversed, then the end token."""
    lengths = rng.integers(3, max_digits + 1, size=count)
    source = np.zeros((count, max_digits), "int32")
    target = np.zeros((count, max_digits + 2), "int32")  # start + digits + end
    for row, length in enumerate(lengths):
        digits = rng.integers(DIGITS, DIGITS + 10, size=length)
        source[row, :length] = digits
        target[row, : length + 2] = [1, *digits[::-1], 2]
    return {"source_ids": source, "target_ids": target[:, :-1]}, target[:, 1:]


def text(ids):
    return "".join(VOCABULARY[i] for i in ids if i >= DIGITS)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--output-dir", default="keras_attention_tour")
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)

    model = build_transformer(len(VOCABULARY), preset="tiny", dropout=0.0)
    model.summary()
    inputs, labels = reversal_data(8000, rng)
    model.compile(
        optimizer=keras.optimizers.Adam(2e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(inputs, labels, batch_size=64, epochs=args.epochs, verbose=2)

    examples, _ = reversal_data(4, np.random.default_rng(1))
    greedy = keras.ops.convert_to_numpy(
        decoding.greedy_search(model, examples["source_ids"], max_length=10)
    )
    beam, _ = decoding.beam_search(model, examples["source_ids"], max_length=10, beam_size=4)
    for source, g, b in zip(
        examples["source_ids"], greedy, keras.ops.convert_to_numpy(beam), strict=True
    ):
        print(f"{text(source):>10} -> greedy {text(g):<10} beam {text(b)}")

    output_dir = Path(args.output_dir)
    source = examples["source_ids"][:1]
    source = source[:, : int((source != 0).sum())]
    target = np.concatenate([[[1]], greedy[:1, : source.shape[1]]], axis=1)
    paths = visualize.plot_model_attention(
        model,
        {"source_ids": source, "target_ids": target},
        target_tokens=[VOCABULARY[i] for i in target[0]],
        source_tokens=[VOCABULARY[i] for i in source[0]],
        output_dir=output_dir,
    )
    print("attention maps:", *map(str, paths), sep="\n  ")


if __name__ == "__main__":
    main()
