"""What the conversion tests share: the committed tiny checkpoints, Hugging
Face's outputs for them (made by fixtures/make_fixtures.py), and our ids
read back as the checkpoint's pieces."""

import json
import struct
from pathlib import Path

import keras
import ml_dtypes
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_attention.data.tokenizers import END_ID, START_ID, load_run_tokenizer, token_ids
from keras_attention.run_files import RunFiles

FIXTURES = Path(__file__).parent / "convert" / "fixtures"
# numpy dtypes -> safetensors' names
SAFETENSORS_DTYPES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(ml_dtypes.bfloat16): "BF16",
}


def write_safetensors(path, tensors):
    """The safetensors layout: u64 header length, JSON header, the bytes."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def reference(name):
    """`(reference.json as a dict, reference_logits.npz)` of fixture `name`."""
    folder = FIXTURES / name
    return (
        json.loads((folder / "reference.json").read_text("utf-8")),
        np.load(folder / "reference_logits.npz"),
    )


def check_logits(model, name, order, prompts, input_ids_too=False):
    """Our logits for fixture `name`'s reference prompts, our ids
    `prompts(texts)`, read in the checkpoint's id order (`order[their id]` is
    ours), equal Hugging Face's; with `input_ids_too`, so do the ids."""
    expected, arrays = reference(name)
    for case in expected["logits"]:
        ids = prompts([expected["texts"][case["text_index"]]])
        if input_ids_too:
            assert [order[i] for i in case["input_ids"]] == list(ids[0])
        logits = np.asarray(model(ids))[0]
        np.testing.assert_allclose(logits[:, order], arrays[case["logits"]], atol=1e-4)
    assert len(expected["logits"]) >= 2


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


def checkpoint_pieces(name):
    """The checkpoint's pieces in its id order (tokenizer.model's)."""
    model = sentencepiece.SentencePieceProcessor(
        model_file=str(FIXTURES / name / "tokenizer.model")
    )
    return [model.id_to_piece(i) for i in range(model.get_piece_size())]


def log_probability(logits, labels):
    """Sum over positions of log_softmax(logits)[label], padding (id 0)
    left out of the softmax as decoding leaves it out."""
    logits = np.array(logits, np.float64)
    logits[:, 0] = -np.inf
    largest = logits.max(-1, keepdims=True)
    log_probs = logits - largest - np.log(np.exp(logits - largest).sum(-1, keepdims=True))
    return float(sum(log_probs[i, label] for i, label in enumerate(labels)))


def check_beam_answer(ours, our_score, theirs, their_score, score_of_theirs):
    """Our beam answer equals Hugging Face's; where it does not, both
    searches saw the same model (Hugging Face's answer scores under ours
    what Hugging Face says) and ours is the better answer: a difference of
    search, not of model. Returns whether the answers are equal."""
    if ours == theirs:
        assert our_score == pytest.approx(their_score, abs=1e-4)
        return True
    assert score_of_theirs == pytest.approx(their_score, abs=1e-4)
    assert our_score > their_score
    return False


WORDS = "the a small big red old new house book child cat dog river town saw bought read".split()


def pairs(count, seed):
    """English phrases and the same in upper case: a task one epoch improves."""
    random = np.random.default_rng(seed)
    sources = [" ".join(random.choice(WORDS, random.integers(2, 6))) for _ in range(count)]
    return [(s, s.upper()) for s in sources]


def write_pairs(path, rows):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    return path


def validation_loss(run, rows):
    """Mean cross-entropy per target token of `rows`, teacher-forced."""
    import keras_attention.models  # noqa: F401

    files = RunFiles(run)
    config = json.loads(files.config.read_text())
    source, target = (load_run_tokenizer(files, config, side) for side in ("source", "target"))
    model = keras.saving.load_model(files.model)
    total, count = 0.0, 0
    for text, translation in rows:
        source_ids = source.tokenize(tf.constant([text])).to_tensor()
        output = target.tokenize(tf.constant([translation]))[0].numpy().tolist()
        inputs = np.array([[START_ID, *output]], "int32")
        labels = [*output, END_ID]
        logits = np.asarray(model({"source_ids": np.asarray(source_ids), "target_ids": inputs}))
        log_probs = (
            logits[0]
            - np.log(np.exp(logits[0] - logits[0].max(-1, keepdims=True)).sum(-1, keepdims=True))
            - logits[0].max(-1, keepdims=True)
        )
        total -= sum(log_probs[i, label] for i, label in enumerate(labels))
        count += len(labels)
    return total / count
