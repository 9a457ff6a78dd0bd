"""A trained `Transformer` or `TransformerLM` as a CTranslate2 model: the
same weights, for CTranslate2's `Translator` or `Generator` (a C++ engine
for fast CPU serving).

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

A `TransformerLM` becomes a `TransformerDecoderModelSpec` (the decoder
alone, as CTranslate2 holds GPT-2 and Llama): positions added to the
embeddings (sinusoidal or learned, their table copied) or rotary ones
(ours turn the two halves of a head's features, CTranslate2's
`rotary_interleave=False`), layer or RMS norms, a dense or SwiGLU
feed-forward network (its gate is CTranslate2's `linear_0`, the plain
half `linear_0_noact`), grouped-query heads (`num_heads_kv`). What its
decoder cannot hold is refused by name (`check_convertible`): ALiBi (its
slopes and positions are its own variant), sliding windows, output
gates, rotary scaling.

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
ACTIVATIONS = {
    "relu": "RELU",
    "silu": "SWISH",
    "swish": "SWISH",
    "gelu": "GELU",
    "gelu_tanh": "GELUTanh",
}
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
    if hasattr(norm, "gamma"):
        spec.gamma = _numpy(norm.gamma)
        spec.beta = _numpy(norm.beta)
    else:  # RMS normalisation: a scale alone
        spec.gamma = _numpy(norm.scale)


def _feed_forward(spec, block):
    _layer_norm(spec.layer_norm, block.feed_forward_norm)
    if block.feed_forward_gate is not None:  # SwiGLU: silu(x W_gate) * x W1
        _linear(spec.linear_0, block.feed_forward_gate)
        _linear(spec.linear_0_noact, block.feed_forward_intermediate)
    else:
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
    """Our positions 0 .. num_positions - 1 added to the embeddings,
    `[P, D]`: the sinusoids, or a learned table (its own length)."""
    layer = model.positional_encoding
    num_positions = getattr(layer, "max_position_embeddings", None) or num_positions
    zeros = ops.zeros((1, num_positions, model.model_dim))
    return _numpy(layer(zeros))[0]


def check_convertible(model):
    """Raises `ValueError` naming what CTranslate2's Transformer (or, for a
    language model, its Transformer decoder) cannot hold."""
    from keras_attention.models.transformer import Transformer
    from keras_attention.models.transformer_lm import TransformerLM

    if isinstance(model, TransformerLM):
        return _check_decoder_only(model)
    if not isinstance(model, Transformer):
        raise ValueError(
            "CTranslate2 export takes a Transformer encoder-decoder (build_transformer) or a "
            f"TransformerLM (build_transformer_lm); received {type(model).__name__}"
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


def _check_decoder_only(model):
    """What CTranslate2's Transformer decoder cannot hold, refused by name."""
    blocks = model.decoder.blocks
    activations = {block.activation.__name__ for block in blocks}
    options = model.decoder.block_options
    if options["feed_forward"] == "dense" and not activations <= set(ACTIVATIONS):
        raise ValueError(
            f"CTranslate2 export needs one of the activations {sorted(ACTIVATIONS)}; "
            f"got {sorted(activations)}"
        )
    unsupported = {
        "sliding_window": None,  # its sliding window is a bound on the cache, not a mask
        "use_gate": False,
        "rotary_scaling_factor": 1.0,
    }
    for option, plain in unsupported.items():
        if options[option] != plain:
            raise ValueError(
                f"CTranslate2's Transformer decoder takes only {option}={plain!r}; "
                f"the model has {option}={options[option]!r}"
            )
    if model.positions == "alibi":
        raise ValueError(
            "CTranslate2 export needs sinusoidal, learned or rotary positions; "
            "the model has positions='alibi' (CTranslate2's ALiBi is another variant)"
        )
    if model.suppressed_ids:
        raise ValueError(
            "CTranslate2 cannot keep a token in the softmax and never generate it; "
            f"the model has suppressed_ids={model.suppressed_ids!r}"
        )


def decoder_spec(model, vocabulary, num_positions=DEFAULT_POSITIONS):
    """Our `TransformerLM` as a `ctranslate2.specs.TransformerDecoderModelSpec`,
    weights filled in; `vocabulary`: the token strings in id order."""
    from ctranslate2.specs import TransformerDecoderModelSpec, common_spec

    check_convertible(model)
    options = model.decoder.block_options
    swiglu = options["feed_forward"] == "swiglu"
    (activation,) = {block.activation.__name__ for block in model.decoder.blocks}
    rotary = model.positions == "rotary"
    spec = TransformerDecoderModelSpec.from_config(
        model.num_layers,
        model.num_heads,
        pre_norm=model.norm_first,
        activation=getattr(common_spec.Activation, "SWISH" if swiglu else ACTIVATIONS[activation]),
        ffn_glu=swiglu,
        rms_norm=options["normalization"] == "rms_norm",
        # Ours turns the halves of a head's features (Llama's layout).
        rotary_dim=0 if rotary else None,
        rotary_interleave=False,
        rotary_base=float(options["rotary_max_wavelength"]),
        num_heads_kv=options["num_key_value_heads"] or model.num_heads,
    )
    decoder = spec.decoder
    spec.config.layer_norm_epsilon = float(options["layer_norm_epsilon"])
    spec.config.unk_token = vocabulary[UNKNOWN_ID]
    spec.config.bos_token = vocabulary[START_ID]
    spec.config.eos_token = vocabulary[END_ID]
    decoder.embeddings.weight = _numpy(model.token_embedding.embeddings)
    decoder.scale_embeddings = bool(model.token_embedding.scale)  # times sqrt(d_model)
    if not rotary:
        decoder.position_encodings.encodings = position_table(model, num_positions)
    if model.decoder.final_norm is not None:
        _layer_norm(decoder.layer_norm, model.decoder.final_norm)
    for layer, block in zip(decoder.layer, model.decoder.blocks, strict=True):
        _self_attention(layer.self_attention, block.self_attention, block.self_attention_norm)
        _feed_forward(layer.ffn, block)
    _output_projection(decoder.projection, model, model.token_embedding)
    spec.register_vocabulary(list(vocabulary))
    return spec


def _output_projection(spec, model, embedding):
    """The output projection (tied to `embedding`, or its own), with a
    bias of NEG_INF on the tokens we never generate."""
    if model.output_projection is None:  # tied to the embedding
        spec.weight = _numpy(embedding.embeddings)
        if model.logits_bias is not None:
            spec.bias = _numpy(model.logits_bias.bias)
    else:
        _linear(spec, model.output_projection)
    # Tokens we never generate: padding (left out of every softmax, as
    # `decoding` does) and a converted model's suppressed ids (Marian's
    # <pad>). CTranslate2 cannot leave a token in the softmax and never
    # pick it; a bias of NEG_INF leaves it out, as its own Marian converter
    # does.
    bias = getattr(spec, "bias", None)
    if not isinstance(bias, np.ndarray):
        bias = np.zeros(embedding.vocabulary_size, "float32")
    bias[[PAD_ID, *(model.suppressed_ids or ())]] = NEG_INF
    spec.bias = bias


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
    _output_projection(spec.decoder.projection, model, model.target_embedding)
    spec.register_source_vocabulary(list(source_vocabulary))
    spec.register_target_vocabulary(list(target_vocabulary))
    return spec


def export_ctranslate2(
    model,
    output_dir,
    source_tokenizer,
    target_tokenizer=None,
    quantization=None,
    vocabulary_files=(),
    overwrite=False,
):
    """Writes `model` as a CTranslate2 model directory that
    `ctranslate2.Translator(output_dir)` (for a `TransformerLM`,
    `ctranslate2.Generator(output_dir)`) loads, with `vocabulary_files`
    (the run's SentencePiece models, say) copied beside it; returns the
    directory, written whole or not at all (`files.write_folder_atomically`).

    Args:
        model: a `Transformer` or a `TransformerLM` (see `check_convertible`).
        output_dir: the directory to write; it must not exist unless
            `overwrite`.
        source_tokenizer, target_tokenizer: the run's tokenisers; their
            vocabularies become CTranslate2's. A language model has one
            (`source_tokenizer`; `target_tokenizer` None).
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
    if getattr(model, "is_decoder_only", False):
        if target_tokenizer is not None:
            raise ValueError("A language model has one tokenizer: `target_tokenizer` must be None")
        spec = decoder_spec(model, source_tokenizer.vocabulary)
    else:
        if target_tokenizer is None:
            raise ValueError("A translation model needs `target_tokenizer`. Received: None")
        spec = transformer_spec(model, source_tokenizer.vocabulary, target_tokenizer.vocabulary)
    spec.validate()
    spec.optimize(quantization=quantization)

    def write(folder):
        spec.save(str(folder))
        for file in vocabulary_files:
            shutil.copy(file, folder / Path(file).name)

    return write_folder_atomically(output_dir, write, replace=overwrite)
