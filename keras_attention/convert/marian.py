"""OPUS-MT: transformers' `MarianMTModel` into our `Transformer`.

What Marian is (transformers' `modeling_marian.py`): post-norm blocks with
biases everywhere, `swish` (SiLU) feed-forward layers, token embeddings
times sqrt(d_model), sinusoidal positions with the sines in the first half
of the vector and the cosines in the second (`sinusoid_layout="halves"`),
layer norm epsilon 1e-5, and logits with `final_logits_bias` added. Sources
end with `</s>`; decoding starts from `<pad>`, which is never generated.
Tokenisation: SentencePiece `source.spm` / `target.spm`, whose pieces are
looked up in `vocab.json` (and `target_vocab.json` when the two sides have
vocabularies of their own).
"""

import numpy as np

from keras_attention.convert.checkpoint import CheckpointError, read_json
from keras_attention.convert.ids import (
    make_id_map,
    never_generated,
    pieces,
    reorder_rows,
)
from keras_attention.data.tokenizers import START_ID, MappedSubwordTokenizer
from keras_attention.layers.positional_encoding import PositionalEncoding
from keras_attention.models import build_transformer

MODEL_TYPES = ("marian",)
ARCHITECTURES = ("MarianMTModel",)
TASK = "translation"
BUILDER = build_transformer
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}


def _equal(checkpoint, encoder_key, decoder_key):
    """The value two keys (encoder, decoder) share; our stacks have one."""
    encoder, decoder = checkpoint.config.get(encoder_key), checkpoint.config.get(decoder_key)
    if encoder != decoder:
        checkpoint.refuse(
            decoder_key,
            decoder,
            f"differs from {encoder_key}={encoder!r}: both stacks are one size",
        )
    return encoder


def _vocabulary(checkpoint, name, size_key):
    """`vocab.json` as a list of pieces in id order, checked against the config."""
    path = checkpoint.file(name)
    vocabulary = read_json(path)
    by_id = {int(i): piece for piece, i in vocabulary.items()}
    if sorted(by_id) != list(range(len(vocabulary))):
        raise CheckpointError(f"{path}: the ids are not 0 .. {len(vocabulary) - 1}, each once")
    size = checkpoint.config.get(size_key) or checkpoint.config.get("vocab_size")
    if size != len(vocabulary):
        checkpoint.refuse(size_key, size, f"but {path} has {len(vocabulary)} entries")
    return [by_id[i] for i in range(len(vocabulary))]


def _special(checkpoint, vocabulary, piece, name):
    if piece not in vocabulary:
        raise CheckpointError(f"{checkpoint.folder / name} has no {piece!r}")
    return vocabulary.index(piece)


def read(checkpoint):
    """What the conversion needs to know, checked: `(builder_arguments,
    sides)`, `sides` mapping "source" and "target" to `(vocabulary,
    id_map)`."""
    config = checkpoint.config
    activation = config.get("activation_function", "swish")
    if activation not in ACTIVATIONS:
        checkpoint.refuse("activation_function", activation, f"is not one of {list(ACTIVATIONS)}")
    for key, supported in (("static_position_embeddings", True), ("normalize_embedding", False)):
        if config.get(key, supported) != supported:
            checkpoint.refuse(key, config[key], f"is not supported (only {supported!r})")
    shared = config.get("share_encoder_decoder_embeddings", True)
    source_vocabulary = _vocabulary(checkpoint, "vocab.json", "vocab_size")
    target_name = "vocab.json" if shared else "target_vocab.json"
    target_vocabulary = (
        source_vocabulary if shared else _vocabulary(checkpoint, target_name, "decoder_vocab_size")
    )
    pad = config.get("pad_token_id")
    start = config.get("decoder_start_token_id", pad)
    end = config.get("eos_token_id")
    if target_vocabulary[end] != "</s>" or target_vocabulary[pad] != "<pad>":
        checkpoint.refuse("eos_token_id", end, "or pad_token_id is not </s> or <pad>")
    if start != pad:
        checkpoint.refuse("decoder_start_token_id", start, f"differs from pad_token_id={pad}")
    source_pad = _special(checkpoint, source_vocabulary, "<pad>", "vocab.json")
    sides = {
        "source": (
            source_vocabulary,
            make_id_map(
                len(source_vocabulary),
                source_pad,
                source_pad,
                _special(checkpoint, source_vocabulary, "</s>", "vocab.json"),
                _special(checkpoint, source_vocabulary, "<unk>", "vocab.json"),
            ),
        ),
        "target": (
            target_vocabulary,
            make_id_map(
                len(target_vocabulary),
                pad,
                start,
                end,
                _special(checkpoint, target_vocabulary, "<unk>", target_name),
            ),
        ),
    }
    arguments = dict(
        num_layers=_equal(checkpoint, "encoder_layers", "decoder_layers"),
        model_dim=config["d_model"],
        num_heads=_equal(checkpoint, "encoder_attention_heads", "decoder_attention_heads"),
        intermediate_dim=_equal(checkpoint, "encoder_ffn_dim", "decoder_ffn_dim"),
        dropout=float(config.get("dropout", 0.1)),
        norm_first=False,
        activation=ACTIVATIONS[activation],
        layer_norm_epsilon=1e-5,
        scale_embeddings=bool(config.get("scale_embedding", False)),
        positions="sinusoidal",
        sinusoid_layout="halves",
        share_embeddings=shared,
        tie_output_embeddings=bool(config.get("tie_word_embeddings", True)),
        output_bias=True,
        suppressed_ids=[START_ID],  # Marian's <pad>: `bad_words_ids`
    )
    return arguments, sides


def tokenizers(checkpoint, sides):
    """The source and target tokenisers, in the graph."""
    made = {}
    for side, spm, append_end in (("source", "source.spm", True), ("target", "target.spm", False)):
        vocabulary, id_map = sides[side]
        made[side] = MappedSubwordTokenizer(
            checkpoint.file(spm).read_bytes(),
            pieces(vocabulary, id_map),
            append_end=append_end,
            language_codes=side == "source",
        )
    return made


def _self_attention(block, weights, prefix, width):
    """A block's self-attention (q, k and v fused, as our layer holds them) and its norm."""
    attention = f"{prefix}.self_attn"
    qkv = weights.dense([f"{attention}.{name}_proj" for name in "qkv"], width, width)
    block.self_attention.qkv_projection.set_weights(qkv)
    block.self_attention.output_projection.set_weights(
        weights.dense(f"{attention}.out_proj", width, width)
    )
    block.self_attention_norm.set_weights(weights.norm(f"{prefix}.self_attn_layer_norm", width))


def _cross_attention(block, weights, prefix, width):
    """A decoder block's attention over the source (k and v fused) and its norm."""
    attention = f"{prefix}.encoder_attn"
    cross = block.cross_attention
    cross.query_projection.set_weights(weights.dense(f"{attention}.q_proj", width, width))
    key_value = weights.dense([f"{attention}.k_proj", f"{attention}.v_proj"], width, width)
    cross.key_value_projection.set_weights(key_value)
    cross.output_projection.set_weights(weights.dense(f"{attention}.out_proj", width, width))
    block.cross_attention_norm.set_weights(weights.norm(f"{prefix}.encoder_attn_layer_norm", width))


def _feed_forward(block, weights, prefix, width, hidden):
    block.feed_forward_intermediate.set_weights(weights.dense(f"{prefix}.fc1", width, hidden))
    block.feed_forward_output.set_weights(weights.dense(f"{prefix}.fc2", hidden, width))
    block.feed_forward_norm.set_weights(weights.norm(f"{prefix}.final_layer_norm", width))


def _check_positions(weights, name):
    """Marian's position table is fixed: if the checkpoint stores it, it must
    be the one our `PositionalEncoding(layout="halves")` computes."""
    if name not in weights:
        return
    stored = weights.tensors[name]
    ours = PositionalEncoding(layout="halves")(np.zeros((1, *stored.shape), "float32"))[0]
    if not np.allclose(stored, np.asarray(ours), atol=1e-4):
        raise CheckpointError(f"{weights.source}: {name} is not Marian's sinusoidal table")
    weights.skip(name)


def load_weights(model, weights, sides):
    """Sets every weight of our `Transformer` from the checkpoint's."""
    width, hidden = model.model_dim, model.intermediate_dim
    (source_vocabulary, source_map), (target_vocabulary, target_map) = (
        sides["source"],
        sides["target"],
    )
    shared = model.share_embeddings
    if shared:
        names = ["model.shared.weight", "model.encoder.embed_tokens.weight"]
        names += ["model.decoder.embed_tokens.weight"]
        stored = [name for name in names if name in weights]
        if not stored:
            raise CheckpointError(f"{weights.source}: tensor 'model.shared.weight' not found")
        embedding = weights.take(stored[0], (len(source_vocabulary), width))
        for name in stored[1:] + (["lm_head.weight"] if "lm_head.weight" in weights else []):
            if not np.array_equal(weights.take(name, embedding.shape), embedding):
                raise CheckpointError(f"{weights.source}: {name} differs from {stored[0]}")
        model.source_embedding.set_weights([reorder_rows(embedding, source_map)])
    else:
        weights.skip("model.shared.weight")
        source = weights.take("model.encoder.embed_tokens.weight", (len(source_vocabulary), width))
        target = weights.take("model.decoder.embed_tokens.weight", (len(target_vocabulary), width))
        model.source_embedding.set_weights([reorder_rows(source, source_map)])
        model.target_embedding.set_weights([reorder_rows(target, target_map)])
    for side in ("encoder", "decoder"):
        _check_positions(weights, f"model.{side}.embed_positions.weight")
    # Our padding row is a copy of Marian's <pad>: out of every softmax (the
    # model's `suppressed_ids` keep <pad> itself, our start id, from being
    # generated while it counts in the softmax, as in Hugging Face).
    bias = weights.take("final_logits_bias", (1, len(target_vocabulary)))[0]
    bias = never_generated(reorder_rows(bias, target_map), [0])
    if model.output_projection is None:
        if not shared and "lm_head.weight" in weights:
            weights.skip("lm_head.weight")  # the decoder embedding's tied copy
        model.logits_bias.set_weights([bias])
    else:
        head = weights.take("lm_head.weight", (len(target_vocabulary), width))
        model.output_projection.set_weights([reorder_rows(head, target_map).T, bias])
    for index, block in enumerate(model.encoder.blocks):
        prefix = f"model.encoder.layers.{index}"
        _self_attention(block, weights, prefix, width)
        _feed_forward(block, weights, prefix, width, hidden)
    for index, block in enumerate(model.decoder.blocks):
        prefix = f"model.decoder.layers.{index}"
        _self_attention(block, weights, prefix, width)
        _cross_attention(block, weights, prefix, width)
        _feed_forward(block, weights, prefix, width, hidden)
    weights.check_all_taken()


def run_settings(checkpoint):
    """The run's decoding settings: the beam size, and the most tokens
    generated. Hugging Face's `max_length` counts the start token, and with
    `forced_eos_token_id` its last token is the end token, forced with a
    log-probability of 0: a search that stops one token earlier finds the
    same answers with the same scores."""
    bad_words = checkpoint.setting("bad_words_ids", [[checkpoint.config.get("pad_token_id")]])
    if bad_words != [[checkpoint.config.get("pad_token_id")]]:
        checkpoint.refuse(
            "bad_words_ids", bad_words, "other than [[pad_token_id]] are not supported"
        )
    forced_end = checkpoint.setting("forced_eos_token_id")
    if forced_end not in (None, checkpoint.config.get("eos_token_id")):
        checkpoint.refuse("forced_eos_token_id", forced_end, "is not the eos_token_id")
    max_length = int(checkpoint.setting("max_length", 512)) - (2 if forced_end is not None else 1)
    positions = int(checkpoint.config.get("max_position_embeddings", 512))
    limit = min(max_length, positions)
    return {
        "beam_size": int(checkpoint.setting("num_beams", 1)),
        "max_input_length": limit,
        "max_decoding_length": limit,
    }
