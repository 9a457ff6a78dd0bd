"""Attention maps as pictures: one heatmap panel per head, tokens on the axes.

The way the illustrated explanations draw attention: each row is a query
token (the word being produced or encoded), each column a key token, and the
shade is how much attention the row pays to the column.

    python -m keras_attention.visualize model.keras \\
        --source-ids "5 6 7" --target-ids "1 5 6" --vocabulary vocab.txt --output-dir maps/
"""

import argparse
import functools
import math
from pathlib import Path

import numpy as np
from keras import ops
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ft2font import FT2Font


def plot_attention(weights, query_tokens, key_tokens, path=None, title=None):
    """Draws attention weights, one panel per head.

    Args:
        weights: `[H, Tq, Tk]` (or `[Tq, Tk]` for one head) attention weights
            of one example.
        query_tokens: `Tq` labels for the rows (the attending tokens).
        key_tokens: `Tk` labels for the columns (the attended tokens).
        path: optional PNG path to save to.
        title: optional figure title.

    Returns:
        The `matplotlib.figure.Figure`, with one axes per head (plus a
        colour bar).
    """
    weights = _per_head(weights)
    num_heads, query_length, key_length = weights.shape
    if len(query_tokens) != query_length or len(key_tokens) != key_length:
        raise ValueError(
            f"Expected {query_length} query tokens and {key_length} key tokens for weights "
            f"of shape {weights.shape}. Received: {len(query_tokens)} and {len(key_tokens)}"
        )
    query_labels, key_labels = drawable(query_tokens), drawable(key_tokens)
    columns = min(num_heads, 4 if key_length <= 12 else 2)  # keep pictures readable
    rows = math.ceil(num_heads / columns)
    cell = 0.35  # inches per token
    label_width = 0.12 * max(len(t) for t in [*query_labels, *key_labels, "x"])
    figure = Figure(
        figsize=(
            columns * (1.0 + label_width + cell * key_length) + 1.0,
            rows * (0.8 + label_width + cell * query_length) + 0.6,
        ),
        layout="constrained",
    )
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    for head in range(rows * columns):
        ax = axes[head // columns][head % columns]
        if head >= num_heads:
            figure.delaxes(ax)
            continue
        image = ax.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(key_length), labels=key_labels, rotation=90)
        ax.set_yticks(range(query_length), labels=query_labels)
        ax.set_title(f"head {head}" if num_heads > 1 else "attention")
    figure.colorbar(image, ax=list(figure.axes), shrink=0.8, label="attention weight")
    if title:
        figure.suptitle(title)
    if path is not None:
        figure.savefig(path, dpi=100, bbox_inches="tight")
    return figure


def redraw_attention(figure, weights, title=None):
    """Puts new `weights` into a figure that `plot_attention` drew, for the
    same tokens (the same shape), and keeps the layout it was last drawn
    with: laying out is over half of a drawing's time, so a picture redrawn
    every epoch is laid out once.

    Args:
        figure: a `Figure` returned by `plot_attention`.
        weights: `[H, Tq, Tk]` (or `[Tq, Tk]`), the shape it was drawn with.
        title: the new figure title, if any.

    Returns:
        `figure`.
    """
    weights = _per_head(weights)
    panels = [ax for ax in figure.axes if ax.get_label() != "<colorbar>"]
    drawn = [ax.images[0].get_array().shape for ax in panels]
    if [weights.shape[1:]] * weights.shape[0] != drawn:
        raise ValueError(
            f"`weights` must have the shape the figure was drawn with, "
            f"{(len(drawn), *drawn[0])}. Received shape {weights.shape}"
        )
    if figure.get_layout_engine() is not None:
        # From now on the figure keeps the layout of its last drawing (laid
        # out again, the panels would move by a pixel or two each time).
        if getattr(figure.canvas, "renderer", None) is None:  # never drawn
            figure.draw_without_rendering()
        figure.set_layout_engine("none")
    for ax, head_weights in zip(panels, weights, strict=True):
        ax.images[0].set_data(head_weights)
    if title:
        if figure.texts:  # the title `plot_attention` drew, where the layout put it
            figure.texts[0].set_text(title)
        else:
            figure.suptitle(title)
    return figure


def _per_head(weights):
    """`weights` as float32 numpy `[H, Tq, Tk]`; `[Tq, Tk]` is one head."""
    weights = np.asarray(ops.convert_to_numpy(weights), dtype="float32")
    if weights.ndim == 2:
        weights = weights[None]
    if weights.ndim != 3:
        raise ValueError(
            f"`weights` must be [H, Tq, Tk] or [Tq, Tk]. Received shape {weights.shape}"
        )
    return weights


@functools.cache
def _font_characters():
    """The code points the font matplotlib draws labels in has glyphs for."""
    path = font_manager.findfont(font_manager.FontProperties())
    return frozenset(FT2Font(path).get_charmap())


def drawable(tokens):
    """`tokens` as labels the figure's font can draw: a character it has no
    glyph for (Thai, say, in DejaVu Sans) is written as its code point,
    `U+0E27`, instead of an empty box and a warning per character."""
    characters = _font_characters()
    return [
        "".join(c if ord(c) in characters else f"U+{ord(c):04X}" for c in str(token))
        for token in tokens
    ]


def attention_maps(model, inputs):
    """Every layer's attention weights for one batch, from `model.attention_scores`.

    Returns a dict: kind (e.g. `"decoder_cross_attention"`) -> list, one per
    layer, of numpy `[B, H, Tq, Tk]`.
    """
    scores = model.attention_scores(inputs)
    return {kind: [ops.convert_to_numpy(w) for w in layers] for kind, layers in scores.items()}


# Which tokens label the rows (queries) and columns (keys) of each kind of map.
AXES = {
    "encoder_self_attention": ("source", "source"),
    "decoder_self_attention": ("target", "target"),
    "decoder_cross_attention": ("target", "source"),
    "self_attention": ("source", "source"),  # classifier and language model
}


def plot_model_attention(model, inputs, *, target_tokens=None, source_tokens, output_dir):
    """Draws every layer and kind of attention of the first example of `inputs`.

    `target_tokens` label the target (decoder) positions, `source_tokens` the
    source (encoder) positions: the rows and the columns of cross-attention,
    in `plot_attention`'s order (query, then key), and keyword-only, so that
    they cannot be swapped by position. A model with one sequence
    (classifier, language model) takes `inputs` token ids and uses
    `source_tokens` for both axes. Returns the written PNG paths, one per
    layer and kind.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokens = {"source": source_tokens, "target": target_tokens}
    paths = []
    for kind, layers in attention_maps(model, inputs).items():
        query_role, key_role = AXES[kind]
        queries, keys = tokens[query_role], tokens[key_role]
        for index, weights in enumerate(layers):
            path = output_dir / f"{kind}_layer{index}.png"
            plot_attention(
                weights[0, :, : len(queries), : len(keys)],
                queries,
                keys,
                path=path,
                title=f"{kind.replace('_', ' ')}, layer {index}",
            )
            paths.append(path)
    return paths


def _read_vocabulary(path):
    """One token per line; the line number is the id."""
    if not Path(path).is_file():
        raise SystemExit(f"error: no vocabulary file at {path}")
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise SystemExit(
            f"error: {path} is not a vocabulary file (one token per line, UTF-8): {error}"
        ) from None


def _parse_ids(text, name):
    try:
        return [int(token) for token in text.split()]
    except ValueError:
        raise SystemExit(
            f"error: --{name} must be space-separated integers, got {text!r}"
        ) from None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.visualize",
        description="Draw every attention layer and head of a saved model as PNG heatmaps.",
    )
    parser.add_argument("model", help="a .keras file saved from a keras_attention model")
    parser.add_argument("--source-ids", required=True, help='source (or only) token ids, "5 6 7"')
    parser.add_argument("--target-ids", help="target token ids, for encoder-decoder models")
    parser.add_argument("--vocabulary", help="token per line, to label the axes")
    parser.add_argument("--output-dir", default="attention_maps", help="where the PNGs go")
    args = parser.parse_args(argv)

    import keras

    import keras_attention.models  # noqa: F401  (registers the model classes)

    if not Path(args.model).is_file():
        raise SystemExit(f"error: no model file at {args.model}")
    model = keras.saving.load_model(args.model)
    if not hasattr(model, "attention_scores"):
        raise SystemExit(f"error: {args.model} is not a keras_attention model")
    source_ids = _parse_ids(args.source_ids, "source-ids")
    target_ids = _parse_ids(args.target_ids, "target-ids") if args.target_ids else None
    vocabulary = _read_vocabulary(args.vocabulary) if args.vocabulary else None

    def label(ids):
        if ids is None:
            return None
        return [vocabulary[i] if vocabulary and i < len(vocabulary) else str(i) for i in ids]

    if isinstance(model.input, dict):  # encoder-decoder
        if target_ids is None:
            raise SystemExit("error: this is an encoder-decoder model: pass --target-ids too")
        inputs = {"source_ids": np.array([source_ids]), "target_ids": np.array([target_ids])}
    else:
        inputs = np.array([source_ids])
    for path in plot_model_attention(
        model,
        inputs,
        target_tokens=label(target_ids),
        source_tokens=label(source_ids),
        output_dir=args.output_dir,
    ):
        print(path)


if __name__ == "__main__":
    main()
