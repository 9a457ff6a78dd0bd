"""Our file recipe against two peers, on the same data for the same
training time, in one run:

    python -m benchmarks.translation_peer --train-file data/en_fr.tsv
    python -m benchmarks.translation_peer --train-file data/en_fr.tsv --peers none \
        --flags "--final-decay 0.2" --json benchmarks/results_final_decay.json   # ours alone

1. Ours: `python -m keras_attention.recipes.translate --train-file FILE`,
   every choice left to the recipe; its training time and its test
   translations (`test_translations.tsv`) are read back.
2. The keras.io KerasHub example: the setup of "English-to-Spanish
   translation with KerasHub": lowercased text, WordPiece vocabularies of
   15,000 per language, `TokenAndPositionEmbedding`, one KerasHub
   `TransformerEncoder` and one `TransformerDecoder` (d_model 256, 8 heads,
   FF 2048), dropout 0.5 before the softmax, RMSprop, batches of 64 padded
   to 40 tokens, greedy decoding with `keras_hub.samplers.GreedySampler`.
3. OpenNMT-py, a dedicated translation toolkit, in its own virtual
   environment: its documented Transformer recipe at our model's size, on
   our run's SentencePiece pieces, beam 4 (`benchmarks/opennmt.py` says
   exactly what is set and why). It runs twice: with the documented 8,000
   warm-up steps, and with 1,000, which puts the schedule's peak inside a
   budget of minutes.

Each peer trains on the same training split (the recipe's hold-out by a
hash of the source) for as many seconds as ours trained, then translates
the same test split. All are scored with sacreBLEU and chrF against the
same references, as written and ignoring case (the KerasHub example
lowercases its data), and the table is printed and written as JSON.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import keras
import sacrebleu
import tensorflow as tf

from benchmarks import measure, opennmt, report
from keras_attention.data import text_files
from keras_attention.data.placeholders import placeholder_survival
from keras_attention.files import write_json
from keras_attention.models.transformer import PRESETS as TRANSFORMER_PRESETS
from keras_attention.run_files import RunFiles, read_config

# The keras.io example's settings.
PEER = dict(
    batch_size=64,
    sequence_length=40,
    vocabulary_size=15000,
    embedding_dim=256,
    intermediate_dim=2048,
    num_heads=8,
)
RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]


def run_ours(train_file, output_dir, flags=()):
    """Runs our recipe as a user would, with `flags` besides the file;
    returns (evaluation, test triples, wall seconds)."""
    started = time.time()
    command = [sys.executable, "-m", "keras_attention.recipes.translate"]
    command += ["--train-file", str(train_file), "--output-dir", str(output_dir), *flags]
    subprocess.run(command, check=True)
    wall = time.time() - started
    evaluation = json.loads((output_dir / "evaluation.json").read_text())
    lines = (output_dir / "test_translations.tsv").read_text(encoding="utf-8").splitlines()[1:]
    triples = [line.split("\t") for line in lines]
    return evaluation, triples, wall


class TimeBudget(keras.callbacks.Callback):
    """Stops training once `seconds` have passed."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_begin(self, logs=None):
        self.started = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if time.time() - self.started > self.seconds:
            self.model.stop_training = True


def train_peer(train_pairs, validation_pairs, seconds):
    """The keras.io example's model and training, for `seconds` of training.
    Returns (translate function, the tokenisers, epochs trained)."""
    import keras_hub

    p = PEER
    train_pairs = [(s.lower(), t.lower()) for s, t in train_pairs]
    validation_pairs = [(s.lower(), t.lower()) for s, t in validation_pairs]

    def vocabulary(texts):
        return keras_hub.tokenizers.compute_word_piece_vocabulary(
            tf.data.Dataset.from_tensor_slices(texts).batch(1000).prefetch(2),
            vocabulary_size=p["vocabulary_size"],
            reserved_tokens=RESERVED,
        )

    source_tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary([s for s, _ in train_pairs]), lowercase=False
    )
    target_tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary([t for _, t in train_pairs]), lowercase=False
    )
    length = p["sequence_length"]
    source_packer = keras_hub.layers.StartEndPacker(
        sequence_length=length, pad_value=source_tokenizer.token_to_id("[PAD]")
    )
    target_packer = keras_hub.layers.StartEndPacker(
        sequence_length=length + 1,
        start_value=target_tokenizer.token_to_id("[START]"),
        end_value=target_tokenizer.token_to_id("[END]"),
        pad_value=target_tokenizer.token_to_id("[PAD]"),
    )

    def preprocess(source, target):
        source = source_packer(source_tokenizer(source))
        target = target_packer(target_tokenizer(target))
        return {"encoder_inputs": source, "decoder_inputs": target[:, :-1]}, target[:, 1:]

    def batches(pairs):
        sources, targets = zip(*pairs, strict=True)
        dataset = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        dataset = dataset.batch(p["batch_size"])
        dataset = dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.shuffle(2048).prefetch(16).cache()

    target_vocabulary = target_tokenizer.vocabulary_size()

    def embedding(vocabulary_size):
        return keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size=vocabulary_size,
            sequence_length=length,
            embedding_dim=p["embedding_dim"],
        )

    encoder_inputs = keras.Input(shape=(None,), name="encoder_inputs")
    x = embedding(source_tokenizer.vocabulary_size())(encoder_inputs)
    encoder_outputs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=p["intermediate_dim"], num_heads=p["num_heads"]
    )(inputs=x)
    decoder_inputs = keras.Input(shape=(None,), name="decoder_inputs")
    encoded = keras.Input(shape=(None, p["embedding_dim"]), name="decoder_state_inputs")
    x = embedding(target_vocabulary)(decoder_inputs)
    x = keras_hub.layers.TransformerDecoder(
        intermediate_dim=p["intermediate_dim"], num_heads=p["num_heads"]
    )(decoder_sequence=x, encoder_sequence=encoded)
    x = keras.layers.Dropout(0.5)(x)
    decoder = keras.Model(
        [decoder_inputs, encoded],
        keras.layers.Dense(target_vocabulary, activation="softmax")(x),
    )
    model = keras.Model(
        [encoder_inputs, decoder_inputs], decoder([decoder_inputs, encoder_outputs])
    )
    model.compile("rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(
        batches(train_pairs),
        epochs=1000,  # the time budget stops it
        validation_data=batches(validation_pairs),
        callbacks=[TimeBudget(seconds)],
        verbose=2,
        shuffle=False,  # the data set shuffles itself, as the example's does (Keras would warn)
    )
    epochs = len(history.history["loss"])

    start_id = target_tokenizer.token_to_id("[START]")
    pad_id = target_tokenizer.token_to_id("[PAD]")

    def translate(sources):
        """Greedy decoding of a batch, as the example does it (each step
        runs the whole model on the whole prefix; no cache)."""
        encoder_tokens = source_packer(source_tokenizer([s.lower() for s in sources]))

        def next_token(prompt, cache, index):
            logits = model([encoder_tokens, prompt])[:, index - 1, :]
            return logits, None, cache

        batch = len(sources)
        prompt = tf.concat(
            [tf.fill([batch, 1], start_id), tf.fill([batch, length - 1], pad_id)], axis=1
        )
        generated = keras_hub.samplers.GreedySampler()(
            next_token,
            prompt,
            stop_token_ids=[target_tokenizer.token_to_id("[END]")],
            index=1,
        )
        texts = target_tokenizer.detokenize(generated)
        texts = texts.numpy() if hasattr(texts, "numpy") else texts  # a list, eagerly
        texts = [t.decode("utf-8") if isinstance(t, bytes) else t for t in texts]
        return [
            t.replace("[PAD]", "").replace("[START]", "").replace("[END]", "").strip()
            for t in texts
        ]

    return translate, epochs


def scores(predictions, references):
    """sacreBLEU and chrF, as written and ignoring case."""
    result = {}
    for case, lowercase in (("", False), ("_lowercase", True)):
        bleu = sacrebleu.BLEU(lowercase=lowercase).corpus_score(predictions, [references])
        chrf = sacrebleu.CHRF(lowercase=lowercase).corpus_score(predictions, [references])
        result["sacrebleu" + case] = round(bleu.score, 2)
        result["chrf" + case] = round(chrf.score, 2)
    return result


# OpenNMT-py's documented warm-up, and one whose peak falls inside a
# budget of minutes (about 1,200 steps fit in 9 minutes on 2 cores).
OPENNMT_WARMUPS = (8000, 1000)


def run_opennmt(environment, folder, our_run, train, validation, test, seconds):
    """OpenNMT-py's documented Transformer recipe at our run's model size
    (see `benchmarks/opennmt.py`), once per warm-up of `OPENNMT_WARMUPS`;
    returns {warm-up: (its results, its test translations)}."""
    files = RunFiles(our_run)
    config = read_config(files.config)
    if config["model"] != "transformer" or not files.vocabulary("source", "subword").exists():
        raise SystemExit("The OpenNMT-py peer needs our run to be a subword Transformer.")
    model = dict(TRANSFORMER_PRESETS[config["model_preset"] or "tiny"])
    model.update(config["model_overrides"])
    commands = opennmt.environment(environment)
    results = {}
    for warmup_steps in OPENNMT_WARMUPS:
        work = Path(folder) / f"warmup_{warmup_steps}"
        opennmt.prepare(
            work,
            train,
            validation,
            files.vocabulary("source", "subword"),
            files.vocabulary("target", "subword"),
        )
        settings = opennmt.config(work, model, config["max_input_length"], warmup_steps)
        checkpoint, steps, trained = opennmt.train(commands, work, settings, seconds)
        predictions, decoding = opennmt.translate(
            commands, work, checkpoint, [s for s, _ in test], 4, config["max_input_length"]
        )
        results[warmup_steps] = (
            {"training_seconds": trained, "steps": steps, "decoding_seconds": decoding},
            predictions,
        )
    return results


PEERS = ("keras_hub_example", "opennmt")
# Copied from ours' evaluation.json into its row.
RUN_RECORDS = ("length_penalty", "decoding_tuning", "weights", "time_budget")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-file", required=True, help="source<TAB>target pairs")
    parser.add_argument("--output-dir", default="runs/translation_peer", help="where runs go")
    parser.add_argument("--json", default="benchmarks/translation_peer.json", help="results")
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help=f"comma-separated, of {', '.join(PEERS)}; none: ours alone",
    )
    parser.add_argument("--flags", default="", help="our recipe's flags besides the file")
    parser.add_argument(
        "--opennmt-environment",
        default=None,
        help="OpenNMT-py's virtual environment, built there unless it exists "
        "(default: OUTPUT_DIR/opennmt-venv)",
    )
    args = parser.parse_args(argv)
    provenance = measure.provenance("translation_peer", argv)
    peers = [] if args.peers == "none" else args.peers.split(",")
    for peer in peers:
        if peer not in PEERS:
            parser.error(f"--peers: unknown peer {peer!r}; known: {', '.join(PEERS)}")
    output_dir = Path(args.output_dir)
    environment = args.opennmt_environment or output_dir / "opennmt-venv"
    if "opennmt" in peers:
        opennmt.environment(environment)  # built before any timing starts

    flags = args.flags.split()
    evaluation, triples, our_wall = run_ours(args.train_file, output_dir / "ours", flags)
    pairs, _ = text_files.read_columns(args.train_file)
    train, validation, test = text_files.hold_out(pairs, 0.05)
    if [s for s, _, _ in triples] != [s for s, _ in test]:
        raise RuntimeError("The peers' test split differs from the recipe's.")
    references = [reference for _, reference, _ in triples]
    predictions = {"ours": [translation for _, _, translation in triples]}
    seconds = evaluation["training_seconds"]
    rows = {
        "ours": {
            "training_seconds": seconds,
            "wall_seconds": round(our_wall, 1),
            "decoding": evaluation["decoding"],
            # What the run chose after training, and which weights it kept.
            **{key: evaluation[key] for key in RUN_RECORDS if key in evaluation},
        }
    }
    if "keras_hub_example" in peers:
        started = time.time()
        translate, epochs = train_peer(train, validation, seconds)
        peer_training = time.time() - started  # the vocabularies included
        started = time.time()
        sources = [source for source, _ in test]
        predictions["keras_hub_example"] = []
        for first in range(0, len(sources), 64):
            predictions["keras_hub_example"] += translate(sources[first : first + 64])
        rows["keras_hub_example"] = {
            "training_seconds": round(peer_training, 1),
            "epochs": epochs,
            "decoding": "greedy",
            "decoding_seconds": round(time.time() - started, 1),
        }
    if "opennmt" in peers:
        folders = (output_dir / "opennmt", output_dir / "ours")
        runs = run_opennmt(environment, *folders, train, validation, test, seconds)
        for warmup_steps, (row, texts) in runs.items():
            name = f"opennmt_warmup_{warmup_steps}"
            rows[name] = dict(row, decoding="beam 4", warmup_steps=warmup_steps)
            predictions[name] = texts
    sources = [source for source, _, _ in triples]
    for name, row in rows.items():
        row.update(scores(predictions[name], references))
        # Of the test sources with placeholders (%s, {name}, <b>, ...), how
        # many translations keep them all.
        row["placeholders"] = placeholder_survival(sources, predictions[name])

    results = {
        **provenance,
        "train_file": str(args.train_file),
        "flags": flags,
        "train_pairs": len(train),
        "test_pairs": len(test),
        "opennmt": {"package": opennmt.OPENNMT, "torch": opennmt.TORCH},
        **rows,
        "examples": [
            {"source": s, "reference": r, **{name: texts[i] for name, texts in predictions.items()}}
            for i, (s, r, _) in enumerate(triples[:12])
        ],
    }
    write_json(args.json, results)
    columns = [
        ("name", "", "s"),
        ("sacrebleu", "sacreBLEU", ""),
        ("chrf", "chrF", ""),
        ("sacrebleu_lowercase", "lowercased: sacreBLEU", ""),
        ("chrf_lowercase", "lowercased: chrF", ""),
        ("training_seconds", "training s", ".0f"),
    ]
    print("\n" + report.markdown_table([{"name": k, **row} for k, row in rows.items()], columns))
    print(f"\nwrote {args.json}")
    return results


if __name__ == "__main__":
    main()
