"""A trained `Transformer` as a CTranslate2 model: the same weights, for
CTranslate2's translator (a C++ engine for fast CPU serving).

CTranslate2 describes a Transformer with a `TransformerSpec`, whose tree of
weights mirrors the paper's: per encoder layer a self-attention (one fused
Q/K/V projection, one output projection, its layer norm) and a feed-forward
network; per decoder layer the same plus an encoder-decoder attention (Q,
then fused K/V, then output). Our layers keep the same fusions, so each
weight is copied across, transposed (CTranslate2 stores `[out, in]`, Keras
`[in, out]`). Four things CTranslate2 would otherwise choose differently
are set explicitly:

- the position table: ours interleaves sin and cos from position 0, while
  CTranslate2's built-in sinusoid concatenates the halves;
- the layer-norm epsilon (ours 1e-6, CTranslate2's default 1e-5);
- post-norm (`pre_norm=False`) for the paper's post-norm models;
- the attention it returns (`return_attention`, `replace_unknowns`): the
  last decoder layer's cross-attention averaged over all its heads
  (`alignment_heads=0`), as `keras_attention.decoding.alignments` and the
  export's `translate_batch` give it; CTranslate2's default is the first
  head alone.

`ctranslate2` is an optional dependency (`pip install ctranslate2`), needed
only here.
"""

import shutil
from pathlib import Path

import numpy as np
from keras import ops

from keras_attention.files import write_folder_atomically
from keras_attention.utils import END_ID, NEG_INF, PAD_ID, START_ID, UNKNOWN_ID, check_choice

# Our feed-forward activations (Keras's names) and CTranslate2's.
ACTIVATIONS = {"relu": "RELU", "silu": "SWISH", "swish": "SWISH", "gelu": "GELU"}
QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16")
# Positions in the table given to CTranslate2: its decoder reads position
# `t` for its `t`-th step, so the table bounds the lengths it can take.
DEFAULT_POSITIONS = 1024


def _numpy(variable):
    return np.asarray(ops.convert_to_numpy(variable), dtype="float32")


def _linear(spec, dense):
    spec.weight = _numpy(dense.kernel).T
    if dense.bias is not None:
        spec.bias = _numpy(dense.bias)


def _layer_norm(spec, norm):
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta)


def _feed_forward(spec, block):
    _layer_norm(spec.layer_norm, block.feed_forward_norm)
    _linear(spec.linear_0, block.feed_forward_intermediate)
    _linear(spec.linear_1, block.feed_forward_output)


def _self_attention(spec, attention, norm):
    _layer_norm(spec.layer_norm, norm)
    _linear(spec.linear[0], attention.qkv_projection)  # Q, K, V fused, in that order
    _linear(spec.linear[1], attention.output_projection)


def _cross_attention(spec, attention, norm):
    _layer_norm(spec.layer_norm, norm)
    _linear(spec.linear[0], attention.query_projection)
    _linear(spec.linear[1], attention.key_value_projection)  # K, V fused
    _linear(spec.linear[2], attention.output_projection)


def position_table(model, num_positions=DEFAULT_POSITIONS):
    """Our sinusoidal positions 0 .. num_positions - 1, `[P, D]`."""
    zeros = ops.zeros((1, num_positions, model.model_dim))
    return _numpy(model.positional_encoding(zeros))[0]


def check_convertible(model):
    """Raises `ValueError` naming what CTranslate2's Transformer cannot hold."""
    from keras_attention.models.transformer import Transformer

    if not isinstance(model, Transformer):
        raise ValueError(
            "CTranslate2 export takes a Transformer encoder-decoder (build_transformer); "
            f"received {type(model).__name__}"
        )
    blocks = model.encoder.blocks + model.decoder.blocks
    activations = {block.activation.__name__ for block in blocks}
    if len(activations) != 1 or not activations <= set(ACTIVATIONS):
        raise ValueError(
            f"CTranslate2 export needs one of the activations {sorted(ACTIVATIONS)}; "
            f"got {sorted(activations)}"
        )
    plain_options = {
        "num_key_value_heads": None,
        "sliding_window": None,
        "use_gate": False,
        "normalization": "layer_norm",
        "feed_forward": "dense",
        "use_bias": True,
    }
    options = model.encoder.block_options
    for option, plain in plain_options.items():
        value = options[option]
        if value != plain:
            raise ValueError(
                f"CTranslate2's Transformer takes only {option}={plain!r}; "
                f"the model has {option}={value!r}"
            )
    if options["positions"] is not None:
        raise ValueError(
            "CTranslate2 export needs positions added to the embeddings (sinusoidal); "
            f"the model has positions={options['positions']!r}"
        )
    epsilons = {block.layer_norm_epsilon for block in blocks}
    if len(epsilons) != 1:
        raise ValueError(f"CTranslate2 takes one layer-norm epsilon; got {sorted(epsilons)}")


def transformer_spec(model, source_vocabulary, target_vocabulary, num_positions=DEFAULT_POSITIONS):
    """Our `Transformer` as a `ctranslate2.specs.TransformerSpec`, weights
    filled in; the vocabularies are the token strings in id order."""
    from ctranslate2.specs import TransformerSpec, common_spec

    check_convertible(model)
    (activation,) = {block.activation.__name__ for block in model.encoder.blocks}
    spec = TransformerSpec.from_config(
        (model.num_layers, model.num_layers),
        model.num_heads,
        pre_norm=model.norm_first,
        activation=getattr(common_spec.Activation, ACTIVATIONS[activation]),
        alignment_layer=-1,  # the last decoder layer's cross-attention,
        alignment_heads=0,  # averaged over all its heads
    )
    (epsilon,) = {block.layer_norm_epsilon for block in model.encoder.blocks}
    spec.config.layer_norm_epsilon = epsilon
    spec.config.unk_token = source_vocabulary[UNKNOWN_ID]
    spec.config.bos_token = target_vocabulary[START_ID]
    spec.config.eos_token = target_vocabulary[END_ID]
    positions = position_table(model, num_positions)
    for side, embedding, stack in (
        (spec.encoder, model.source_embedding, model.encoder),
        (spec.decoder, model.target_embedding, model.decoder),
    ):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = _numpy(embedding.embeddings)
        side.scale_embeddings = bool(embedding.scale)  # times sqrt(d_model)
        side.position_encodings.encodings = positions
        if stack.final_norm is not None:  # pre-norm: one norm after the last block
            _layer_norm(side.layer_norm, stack.final_norm)
    for layer, block in zip(spec.encoder.layer, model.encoder.blocks, strict=True):
        _self_attention(layer.self_attention, block.self_attention, block.self_attention_norm)
        _feed_forward(layer.ffn, block)
    for layer, block in zip(spec.decoder.layer, model.decoder.blocks, strict=True):
        _self_attention(layer.self_attention, block.self_attention, block.self_attention_norm)
        _cross_attention(layer.attention, block.cross_attention, block.cross_attention_norm)
        _feed_forward(layer.ffn, block)
    if model.output_projection is None:  # tied to the target embedding
        spec.decoder.projection.weight = _numpy(model.target_embedding.embeddings)
        if model.logits_bias is not None:
            spec.decoder.projection.bias = _numpy(model.logits_bias.bias)
    else:
        _linear(spec.decoder.projection, model.output_projection)
    # Tokens we never generate: padding (left out of every softmax, as
    # `decoding` does) and a converted model's suppressed ids (Marian's
    # <pad>). CTranslate2 cannot leave a token in the softmax and never
    # pick it; a bias of NEG_INF leaves it out, as its own Marian converter
    # does.
    bias = getattr(spec.decoder.projection, "bias", None)
    if not isinstance(bias, np.ndarray):
        bias = np.zeros(model.target_embedding.vocabulary_size, "float32")
    bias[[PAD_ID, *(model.suppressed_ids or ())]] = NEG_INF
    spec.decoder.projection.bias = bias
    spec.register_source_vocabulary(list(source_vocabulary))
    spec.register_target_vocabulary(list(target_vocabulary))
    return spec


def export_ctranslate2(
    model,
    output_dir,
    source_tokenizer,
    target_tokenizer,
    quantization=None,
    vocabulary_files=(),
    overwrite=False,
):
    """Writes `model` as a CTranslate2 model directory that
    `ctranslate2.Translator(output_dir)` loads, with `vocabulary_files`
    (the run's SentencePiece models, say) copied beside it; returns the
    directory, written whole or not at all (`files.write_folder_atomically`).

    Args:
        model: a `Transformer` (see `check_convertible`).
        output_dir: the directory to write; it must not exist unless
            `overwrite`.
        source_tokenizer, target_tokenizer: the run's tokenisers; their
            vocabularies become CTranslate2's.
        quantization: None (float32) or one of `QUANTIZATIONS`: the weights'
            type on disk.
        vocabulary_files: files copied into the directory as they are.
        overwrite: bool, replace an existing `output_dir`.
    """
    check_convertible(model)
    if quantization is not None:
        check_choice("quantization", quantization, QUANTIZATIONS)
    output_dir = Path(output_dir)
    if output_dir.exists() and not overwrite:
        raise FileExistsError(f"{output_dir} already exists; pass overwrite=True to replace it")
    spec = transformer_spec(model, source_tokenizer.vocabulary, target_tokenizer.vocabulary)
    spec.validate()
    spec.optimize(quantization=quantization)

    def write(folder):
        spec.save(str(folder))
        for file in vocabulary_files:
            shutil.copy(file, folder / Path(file).name)

    return write_folder_atomically(output_dir, write, replace=overwrite)
