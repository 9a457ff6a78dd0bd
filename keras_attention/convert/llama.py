"""Llama, Mistral and Qwen2: transformers' `LlamaForCausalLM`,
`MistralForCausalLM` and `Qwen2ForCausalLM` into our `TransformerLM`.

What they are (transformers' `modeling_llama.py`, `modeling_mistral.py`,
`modeling_qwen2.py`):
pre-norm blocks with RMS norms (`rms_norm_eps`) and a final norm, rotary
positions in the rotate-half layout with base `rope_theta`, grouped-query
attention (`num_key_value_heads`), a SwiGLU feed-forward network
`down(silu(gate(x)) * up(x))`, no biases unless `attention_bias` /
`mlp_bias` say so, token embeddings not scaled, tied or untied output
embeddings; Mistral adds a sliding window; Qwen2 has biases on q, k and v
only. Tokenisation: Llama 2's and Mistral's SentencePiece `tokenizer.model`
(its ids are the model's), the BOS token before every prompt as
`tokenizer_config.json` says; or, without a `tokenizer.model`, the
byte-level BPE `tokenizer.json` of Llama 3 and Qwen2 (`byte_level_bpe`),
whose post-processor says whether a start token comes first (Llama 3's
`<|begin_of_text|>`; none for Qwen2).
"""

import numpy as np

from keras_attention.convert.byte_level_bpe import make_tokenizer, read_byte_level_bpe
from keras_attention.convert.checkpoint import CheckpointError
from keras_attention.convert.ids import NO_ID, make_id_map, never_generated, pieces, reorder_rows
from keras_attention.data.tokenizers import MappedSubwordTokenizer
from keras_attention.models import build_transformer_lm

MODEL_TYPES = ("llama", "mistral", "qwen2")
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
TASK = "language_model"
BUILDER = build_transformer_lm


def _rope(checkpoint, head_dim):
    """`(rope_theta, scaling)` from the config, whichever way transformers
    wrote it (`rope_theta` and `rope_scaling`, or transformers 5's
    `rope_parameters`): `scaling` is the linear factor, or for `llama3` one
    factor per frequency (`_llama3_factors`)."""
    config = checkpoint.config
    parameters = dict(config.get("rope_scaling") or {})
    parameters.update(config.get("rope_parameters") or {})
    theta = float(parameters.get("rope_theta", config.get("rope_theta", 10000.0)))
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    key = "rope_parameters" if "rope_parameters" in config else "rope_scaling"
    if parameters.get("partial_rotary_factor", 1.0) != 1.0:
        checkpoint.refuse(key, config[key], "has a partial_rotary_factor: not supported (1.0)")
    if kind == "default":
        return theta, 1.0
    if kind == "linear":
        return theta, float(parameters["factor"])
    if kind == "llama3":
        return theta, _llama3_factors(checkpoint, parameters, theta, head_dim)
    checkpoint.refuse(
        key, config[key], "has a rope_type that is not supported (default, linear, llama3)"
    )


def _llama3_factors(checkpoint, parameters, theta, head_dim):
    """Llama 3.1's rope scaling (transformers' `_compute_llama3_parameters`)
    as one factor per frequency, each dividing it: the frequencies whose
    wavelength is longer than `original_max_position_embeddings /
    low_freq_factor` are divided by `factor`, those shorter than
    `original_max_position_embeddings / high_freq_factor` kept, and those
    between moved smoothly from one to the other."""
    context = parameters.get(
        "original_max_position_embeddings", checkpoint.config.get("max_position_embeddings")
    )
    names = ("factor", "low_freq_factor", "high_freq_factor")
    for name in names:
        if not isinstance(parameters.get(name), int | float):
            key = "rope_parameters" if "rope_parameters" in checkpoint.config else "rope_scaling"
            checkpoint.refuse(key, checkpoint.config[key], f"has no number {name} for llama3")
    factor, low, high = (float(parameters[name]) for name in names)
    frequency = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelength = 2 * np.pi / frequency
    scaled = np.where(wavelength > context / low, frequency / factor, frequency)
    smooth = (context / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    between = (wavelength >= context / high) & (wavelength <= context / low)
    scaled = np.where(between, smoothed, scaled)
    return [float(f) for f in frequency / scaled]


def _spm_vocabulary(checkpoint):
    import sentencepiece

    path = checkpoint.file("tokenizer.model")
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as error:
        raise CheckpointError(f"{path} is not a SentencePiece model: {error}") from None
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())], processor


def _spm_side(checkpoint):
    """`(vocabulary, id_map)` of Llama 2's and Mistral's `tokenizer.model`."""
    config = checkpoint.config
    vocabulary, processor = _spm_vocabulary(checkpoint)
    size = config["vocab_size"]
    if size != len(vocabulary):
        checkpoint.refuse("vocab_size", size, f"but tokenizer.model has {len(vocabulary)} pieces")
    bos = config.get("bos_token_id", processor.bos_id())
    eos = _end_id(checkpoint, processor.eos_id())
    if not checkpoint.tokenizer_config.get("add_bos_token", True):
        raise CheckpointError(
            f"{checkpoint.folder / 'tokenizer_config.json'}: add_bos_token=false is not supported"
        )
    if checkpoint.tokenizer_config.get("add_eos_token", False):
        raise CheckpointError(
            f"{checkpoint.folder / 'tokenizer_config.json'}: add_eos_token=true is not supported"
        )
    return vocabulary, make_id_map(size, None, bos, eos, processor.unk_id())


def _bpe_side(checkpoint):
    """`(tokenizer.json as read, id_map)` of Llama 3's and Qwen2's byte-level BPE."""
    tokenizer = read_byte_level_bpe(checkpoint, checkpoint.config["vocab_size"])
    eos = _end_id(checkpoint, None)
    return tokenizer, make_id_map(len(tokenizer["pieces"]), None, tokenizer["start"], eos, None)


def _end_id(checkpoint, default):
    eos = checkpoint.config.get("eos_token_id", default)
    if isinstance(eos, list):
        checkpoint.refuse("eos_token_id", eos, "names several end tokens; one is supported")
    if eos is None:
        checkpoint.refuse("eos_token_id", eos, "is needed: the token that ends a completion")
    return eos


def read(checkpoint):
    """`(builder_arguments, sides)`, `sides` mapping "text" to
    `(vocabulary, id_map)` (SentencePiece) or `(tokenizer.json as read,
    id_map)` (byte-level BPE)."""
    config = checkpoint.config
    if checkpoint.file("tokenizer.model", required=False).is_file():
        side = _spm_side(checkpoint)
    else:
        side = _bpe_side(checkpoint)
    qwen2 = config.get("model_type") == "qwen2"
    activation = config.get("hidden_act", "silu")
    if activation not in ("silu", "swish"):
        checkpoint.refuse("hidden_act", activation, "is not supported (silu)")
    if config.get("attention_bias", False) != config.get("mlp_bias", False):
        checkpoint.refuse("mlp_bias", config.get("mlp_bias"), "differs from attention_bias")
    width, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or width // heads
    if head_dim * heads != width:
        checkpoint.refuse("head_dim", head_dim, f"times {heads} heads is not hidden_size={width}")
    if config.get("pretraining_tp", 1) != 1:
        checkpoint.refuse("pretraining_tp", config["pretraining_tp"], "is not supported (1)")
    theta, scaling = _rope(checkpoint, head_dim)
    if qwen2 and config.get("use_sliding_window", False):
        checkpoint.refuse("use_sliding_window", True, "is not supported for Qwen2 (false)")
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    tied = bool(config.get("tie_word_embeddings", False))
    arguments = dict(
        num_layers=config["num_hidden_layers"],
        model_dim=width,
        num_heads=heads,
        num_key_value_heads=config.get("num_key_value_heads") or heads,
        intermediate_dim=config["intermediate_size"],
        dropout=float(config.get("attention_dropout", 0.0)),
        norm_first=True,
        normalization="rms_norm",
        layer_norm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
        feed_forward="swiglu",
        positions="rotary",
        rotary_max_wavelength=theta,
        rotary_scaling_factor=scaling,
        # Qwen2's q, k and v have biases and its other layers none: ours
        # all have them then, zeros where Qwen2 has none.
        use_bias=qwen2 or bool(config.get("attention_bias", False)),
        sliding_window=window if checkpoint.config.get("model_type") == "mistral" else None,
        scale_embeddings=False,
        tie_output_embeddings=tied,
        # Where our ids 1-3 are no token of the checkpoint's (Qwen2 has no
        # start token, neither it nor Llama 3 an unknown one), a -inf bias
        # keeps them out of every softmax, so that scores are the checkpoint's.
        output_bias=tied and bool(_missing(side[1])),
    )
    # Which projections the checkpoint gives biases.
    biased = "qkv" if qwen2 else "all" if arguments["use_bias"] else "none"
    return arguments, {"text": side, "biased": biased}


def _missing(id_map):
    """Our ids past padding that are no token of the checkpoint's."""
    return [i for i, checkpoint_id in enumerate(id_map) if checkpoint_id == NO_ID and i > 0]


def tokenizers(checkpoint, sides):
    vocabulary, id_map = sides["text"]
    if isinstance(vocabulary, dict):  # tokenizer.json, read
        return {"text": make_tokenizer(vocabulary, id_map)}
    model = checkpoint.file("tokenizer.model").read_bytes()
    # transformers 5's Llama tokenizer (legacy=False) adds the word-boundary
    # prefix only to a text that does not start with a space.
    legacy = bool(checkpoint.tokenizer_config.get("legacy", False))
    tokenizer = MappedSubwordTokenizer(
        model, pieces(vocabulary, id_map), byte_fallback=True, space_as_prefix=not legacy
    )
    return {"text": tokenizer}


def load_weights(model, weights, sides):
    vocabulary, id_map = sides["text"]
    size = len(vocabulary["pieces"] if isinstance(vocabulary, dict) else vocabulary)
    width, hidden = model.model_dim, model.intermediate_dim
    heads, kv_heads = model.num_heads, model.num_key_value_heads
    head_dim = width // heads
    qkv_bias, other_bias = sides["biased"] != "none", sides["biased"] == "all"

    def dense(names, shape_in, shape_out, bias=other_bias):
        """A Dense's weights, with zeros for a bias our layer has and the checkpoint lacks."""
        kernel_and_bias = weights.dense(names, shape_in, shape_out, bias)
        if model.use_bias and not bias:
            kernel_and_bias.append(np.zeros(kernel_and_bias[0].shape[1], np.float32))
        return kernel_and_bias

    embedding = weights.take("model.embed_tokens.weight", (size, width))
    model.token_embedding.set_weights([reorder_rows(embedding, id_map)])
    logits_bias = never_generated(np.zeros(len(id_map)), _missing(id_map))
    if model.output_projection is None:
        if "lm_head.weight" in weights:
            if not np.array_equal(weights.take("lm_head.weight", embedding.shape), embedding):
                raise CheckpointError(
                    f"{weights.source}: tie_word_embeddings is true but lm_head.weight differs "
                    "from model.embed_tokens.weight"
                )
        if model.logits_bias is not None:
            model.logits_bias.set_weights([logits_bias])
    else:
        head = weights.take("lm_head.weight", (size, width))
        model.output_projection.set_weights([reorder_rows(head, id_map).T, logits_bias])
    model.decoder.final_norm.set_weights(weights.norm("model.norm", width, bias=False))
    for index, block in enumerate(model.decoder.blocks):
        prefix = f"model.layers.{index}"
        attention, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        widths = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        qkv = dense([f"{attention}.{name}_proj" for name in "qkv"], width, widths, qkv_bias)
        block.self_attention.qkv_projection.set_weights(qkv)
        block.self_attention.output_projection.set_weights(
            dense(f"{attention}.o_proj", width, width)
        )
        block.self_attention_norm.set_weights(
            weights.norm(f"{prefix}.input_layernorm", width, bias=False)
        )
        block.feed_forward_gate.set_weights(dense(f"{mlp}.gate_proj", width, hidden))
        block.feed_forward_intermediate.set_weights(dense(f"{mlp}.up_proj", width, hidden))
        block.feed_forward_output.set_weights(dense(f"{mlp}.down_proj", hidden, width))
        block.feed_forward_norm.set_weights(
            weights.norm(f"{prefix}.post_attention_layernorm", width, bias=False)
        )
    for name in list(weights.tensors):
        if name.endswith("rotary_emb.inv_freq"):  # a buffer older checkpoints saved
            weights.skip(name)
    weights.check_all_taken()


def run_settings(checkpoint):
    """The run's beam size, and the most tokens a prompt keeps and a
    completion adds: `generation_config.json`'s `max_new_tokens`, or 256,
    within the model's positions."""
    max_length = int(checkpoint.generation_config.get("max_new_tokens") or 256)
    positions = int(checkpoint.config.get("max_position_embeddings", 2 * max_length))
    limit = min(max_length, positions // 2)
    return {
        "beam_size": int(checkpoint.setting("num_beams", 1)),
        "max_input_length": limit,
        "max_decoding_length": limit,
    }
