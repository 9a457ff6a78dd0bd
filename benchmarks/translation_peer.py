"""Our file recipe against the keras.io KerasHub translation example, on the
same data for the same training time, in one run.

    python -m benchmarks.translation_peer --train-file data/en_fr.tsv

1. Ours: `python -m keras_attention.recipes.translate --train-file FILE`,
   every choice left to the recipe; its training time and its test
   translations (`test_translations.tsv`) are read back.
2. The peer: the setup of "English-to-Spanish translation with KerasHub"
   (keras.io): lowercased text, WordPiece vocabularies of 15,000 per
   language, `TokenAndPositionEmbedding`, one KerasHub `TransformerEncoder`
   and one `TransformerDecoder` (d_model 256, 8 heads, FF 2048), dropout 0.5
   before the softmax, RMSprop, batches of 64 padded to 40 tokens, greedy
   decoding with `keras_hub.samplers.GreedySampler`. It trains on the same
   training split (the recipe's hold-out by a hash of the source) for as
   many seconds as ours trained, then translates the same test split.
3. Both are scored with sacreBLEU and chrF against the same references,
   ignoring case (the peer lowercases its data, as the example does), and
   the table is printed and written as JSON.
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

from keras_attention.data import text_files

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


def run_ours(train_file, output_dir):
    """Runs our recipe as a user would; returns (evaluation, test triples, wall seconds)."""
    started = time.time()
    command = [sys.executable, "-m", "keras_attention.recipes.translate"]
    command += ["--train-file", str(train_file), "--output-dir", str(output_dir)]
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
    """Case-insensitive sacreBLEU and chrF."""
    bleu = sacrebleu.BLEU(lowercase=True).corpus_score(predictions, [references])
    chrf = sacrebleu.CHRF(lowercase=True).corpus_score(predictions, [references])
    return round(bleu.score, 2), round(chrf.score, 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-file", required=True, help="source<TAB>target pairs")
    parser.add_argument("--output-dir", default="runs/translation_peer", help="where runs go")
    parser.add_argument("--json", default="benchmarks/translation_peer.json", help="results")
    args = parser.parse_args(argv)
    output_dir = Path(args.output_dir)

    evaluation, triples, our_wall = run_ours(args.train_file, output_dir / "ours")
    pairs, _ = text_files.read_columns(args.train_file)
    train, validation, test = text_files.hold_out(pairs, 0.05)
    if [s for s, _, _ in triples] != [s for s, _ in test]:
        raise RuntimeError("The peer's test split differs from the recipe's.")
    references = [reference for _, reference, _ in triples]
    ours = scores([translation for _, _, translation in triples], references)

    started = time.time()
    translate, epochs = train_peer(train, validation, evaluation["training_seconds"])
    peer_training = time.time() - started  # the vocabularies included
    started = time.time()
    sources = [source for source, _ in test]
    peer_predictions = []
    for first in range(0, len(sources), 64):
        peer_predictions += translate(sources[first : first + 64])
    peer_decoding = time.time() - started
    peer = scores(peer_predictions, references)

    results = {
        "train_file": str(args.train_file),
        "train_pairs": len(train),
        "test_pairs": len(test),
        "ours": {
            "sacrebleu_lowercase": ours[0],
            "chrf_lowercase": ours[1],
            "sacrebleu_cased": evaluation["sacrebleu"],
            "training_seconds": evaluation["training_seconds"],
            "wall_seconds": round(our_wall, 1),
            "decoding": evaluation["decoding"],
        },
        "keras_hub_example": {
            "sacrebleu_lowercase": peer[0],
            "chrf_lowercase": peer[1],
            "training_seconds": round(peer_training, 1),
            "epochs": epochs,
            "decoding_seconds": round(peer_decoding, 1),
        },
        "bleu_ratio": round(ours[0] / max(peer[0], 1e-9), 2),
        "examples": [
            {"source": s, "reference": r, "ours": o, "keras_hub_example": k}
            for (s, r, o), k in list(zip(triples, peer_predictions, strict=True))[:12]
        ],
    }
    Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(
        f"\n| | sacreBLEU (lowercased) | chrF | training |\n|---|---|---|---|\n"
        f"| ours | {ours[0]} | {ours[1]} | {evaluation['training_seconds']:.0f} s |\n"
        f"| KerasHub example | {peer[0]} | {peer[1]} | {peer_training:.0f} s, {epochs} epochs |\n"
        f"\nBLEU ratio: {results['bleu_ratio']}x; wrote {args.json}"
    )
    return results


if __name__ == "__main__":
    main()
