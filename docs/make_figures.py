"""Makes every picture of the guide (docs/guide.md) with this package's code.

    python docs/make_figures.py                  # train both dates models (about 12 minutes)
    python docs/make_figures.py --runs-dir runs  # use models the recipes already trained there
    python docs/make_figures.py --quick          # tiny training: checks that it all still runs

Trained models come from the translate recipe: the RNN with Bahdanau
attention (`--preset dates_bahdanau`) and the Transformer (the default), in
`<runs-dir>/translate_bahdanau/` and `<runs-dir>/translate/`. The pictures
go to `docs/figures/` (or `--output-dir`), named as the guide names them.
The explorer's are screenshots of its page in Debian's Chromium
(`apt-get install chromium`, or KERAS_ATTENTION_CHROMIUM naming a Chromium
or Chrome binary), driven by Playwright.
"""

import argparse
import math
import sys
import tempfile
import threading
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import keras_attention  # noqa: F401  (registers the models for loading)
from keras_attention import visualize
from keras_attention.data.tokenizers import START_ID, CharacterTokenizer
from keras_attention.explore import Explorer
from keras_attention.explore.__main__ import make_server
from keras_attention.layers import PositionalEncoding
from keras_attention.layers._attention import masked_softmax
from keras_attention.recipes import translate

# The tests' Chromium launcher (tests/explore_helpers.py) draws the explorer's pictures too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from explore_helpers import launch_chromium  # noqa: E402

FIGURES = (
    "seq2seq_attention.png",
    "scaling_by_sqrt_dk.png",
    "positional_encoding.png",
    "encoder_self_attention.png",
    "multi_head_cross_attention.png",
    "explorer_step_through.png",
    "explorer_head_view.png",
    "explorer_model_view.png",
    "explorer_heat_map.png",
)
EXAMPLE = "mercoledì 19 marzo 1975"  # a test-split date (Italian)
QUICK_FLAGS = ["--train-examples", "512", "--test-examples", "8", "--epochs", "1"]


def trained_run(runs_dir, name, preset, quick):
    """The recipe's output folder for `preset`, training it if it is not there."""
    run_dir = Path(runs_dir) / name
    if not (run_dir / "model.keras").is_file():
        flags = ["--preset", preset, "--output-dir", str(run_dir)]
        translate.main(flags + (QUICK_FLAGS if quick else []))
    return run_dir


def load(run_dir):
    model = keras.saving.load_model(run_dir / "model.keras")
    source = CharacterTokenizer.load(run_dir / "source_vocabulary.txt")
    target = CharacterTokenizer.load(run_dir / "target_vocabulary.txt")
    return model, source, target


def translate_with_attention(run_dir, text):
    """The export's `translate_with_attention` answer for one text."""
    version = max(p for p in (run_dir / "serving" / "translate").iterdir() if p.name.isdigit())
    served = tf.saved_model.load(str(version)).signatures["translate_with_attention"]
    return served(text=tf.constant([text]))


def tokens(row):
    return [t.decode("utf-8") for t in row.numpy() if t]


def cross_attention_figure(outputs, path, title):
    source, target = tokens(outputs["source_tokens"][0]), tokens(outputs["target_tokens"][0])
    weights = outputs["attention"][0].numpy()[:, : len(target), : len(source)]
    visualize.plot_attention(weights, target, source, path=path, title=title)


def scaling_figure(path, seed=0):
    """Softmax of q.k over 8 keys, without and with the division by sqrt(d_k)."""
    random = np.random.default_rng(seed)
    figure = Figure(figsize=(10, 5.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, 3, sharey=True)
    for column, depth in enumerate((4, 64, 512)):
        query, keys = random.normal(size=depth), random.normal(size=(8, depth))
        scores = (keys @ query).astype("float32")  # [8]: grows like sqrt(d_k)
        for row, (scaled, label) in enumerate(((False, "q.k"), (True, "q.k / sqrt(d_k)"))):
            logits = scores / math.sqrt(depth) if scaled else scores
            weights = keras.ops.convert_to_numpy(masked_softmax(logits[None]))[0]
            axis = axes[row][column]
            axis.bar(range(8), weights)
            axis.set_title(f"d_k = {depth}: softmax({label})", fontsize=10)
            axis.set_xlabel("key")
    axes[0][0].set_ylabel("attention weight")
    axes[1][0].set_ylabel("attention weight")
    figure.suptitle("Dividing by sqrt(d_k) keeps the softmax from saturating as d_k grows")
    figure.savefig(path, dpi=100)


def positional_encoding_figure(path, length=64, depth=128):
    encoding = keras.ops.convert_to_numpy(PositionalEncoding()(np.zeros((1, length, depth))))[0]
    figure = Figure(figsize=(10, 5), layout="constrained")
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    image = axis.imshow(encoding, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    axis.set_xlabel("embedding dimension i (even: sin, odd: cos)")
    axis.set_ylabel("position")
    axis.set_title(f"Sinusoidal positional encoding, {length} positions x d_model {depth}")
    figure.colorbar(image, ax=axis, label="PE(pos, i)")
    figure.savefig(path, dpi=100)


def explorer_figures(run_dir, text, output_dir, step, column):
    """Screenshots of the explorer on `run_dir` (a character run) answering
    `text`: the step-through at output token `step`, the head view of the
    last cross-attention layer, the model view, and the heat map with the
    cursor on output token `step` and source character `column`."""
    from playwright.sync_api import sync_playwright

    server = make_server(Explorer(run_dir), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            try:
                browser = launch_chromium(playwright, "The explorer's pictures")
            except RuntimeError as error:
                raise SystemExit(str(error)) from None
            page = browser.new_page(viewport={"width": 1100, "height": 700})
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            page.fill("#text", text)
            for _ in range(2):  # the first answer compiles the model: show the second
                page.click("#go")
                page.wait_for_function(
                    "document.querySelector('#status').textContent.startsWith('answered')"
                )
            rows = int(page.get_attribute("#step", "max")) + 1  # output tokens, </s> too
            page.focus("#step")
            for _ in range(step):
                page.keyboard.press("ArrowRight")
            page.screenshot(path=str(output_dir / "explorer_step_through.png"), full_page=True)
            page.click('#tabs button[data-view="heads"]')
            page.screenshot(path=str(output_dir / "explorer_head_view.png"), full_page=True)
            page.click('#tabs button[data-view="model"]')
            page.screenshot(path=str(output_dir / "explorer_model_view.png"), full_page=True)
            # The heat map, the cursor on output token `step` and source token `column`.
            page.click('#tabs button[data-view="map"]')
            box = page.locator("#view .heat").bounding_box()
            page.mouse.move(  # a character run: one source token a character
                box["x"] + box["width"] * (column + 0.5) / len(text),
                box["y"] + box["height"] * (step + 0.5) / rows,
            )
            page.screenshot(path=str(output_dir / "explorer_heat_map.png"), full_page=True)
            browser.close()
    finally:
        server.shutdown()
        server.server_close()


def make_figures(output_dir, runs_dir, quick=False):
    """Writes every figure of `FIGURES` to `output_dir`; returns their paths."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    rnn_run = trained_run(runs_dir, "translate_bahdanau", "dates_bahdanau", quick)
    transformer_run = trained_run(runs_dir, "translate", "dates", quick)

    outputs = translate_with_attention(rnn_run, EXAMPLE)
    cross_attention_figure(
        outputs,
        output_dir / "seq2seq_attention.png",
        f"RNN + Bahdanau attention: {EXAMPLE} -> {outputs['translation'][0].numpy().decode()}",
    )
    scaling_figure(output_dir / "scaling_by_sqrt_dk.png")
    positional_encoding_figure(output_dir / "positional_encoding.png")

    model, source_tokenizer, _ = load(transformer_run)
    ids = source_tokenizer.tokenize(tf.constant([EXAMPLE])).to_tensor().numpy()
    encoder = model.attention_scores({"source_ids": ids, "target_ids": np.array([[START_ID]])})
    characters = [source_tokenizer.vocabulary[i] for i in ids[0]]
    visualize.plot_attention(
        keras.ops.convert_to_numpy(encoder["encoder_self_attention"][-1])[0],
        characters,
        characters,
        path=output_dir / "encoder_self_attention.png",
        title=f"Transformer encoder, last layer, self-attention over {EXAMPLE!r}",
    )
    outputs = translate_with_attention(transformer_run, EXAMPLE)
    cross_attention_figure(
        outputs,
        output_dir / "multi_head_cross_attention.png",
        f"Transformer decoder, last layer, 4 heads: {EXAMPLE} -> "
        f"{outputs['translation'][0].numpy().decode()}",
    )
    # 1975-03-19: step 6 (from 0) writes the month's "3", which reads "marzo".
    explorer_figures(transformer_run, EXAMPLE, output_dir, step=6, column=EXAMPLE.index("marzo"))
    return [output_dir / name for name in FIGURES]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default=str(Path(__file__).with_name("figures")))
    parser.add_argument("--runs-dir", help="recipe outputs to use (trained there if missing)")
    parser.add_argument("--quick", action="store_true", help="tiny training, to check it runs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        for path in make_figures(args.output_dir, args.runs_dir or scratch, args.quick):
            print(path)


if __name__ == "__main__":
    main()
