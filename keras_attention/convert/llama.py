"""Llama and Mistral: transformers' `LlamaForCausalLM` and
`MistralForCausalLM` into our `TransformerLM`.

What they are (transformers' `modeling_llama.py`, `modeling_mistral.py`):
pre-norm blocks with RMS norms (`rms_norm_eps`) and a final norm, rotary
positions in the rotate-half layout with base `rope_theta`, grouped-query
attention (`num_key_value_heads`), a SwiGLU feed-forward network
`down(silu(gate(x)) * up(x))`, no biases unless `attention_bias` /
`mlp_bias` say so, token embeddings not scaled, tied or untied output
embeddings; Mistral adds a sliding window. Tokenisation: the SentencePiece
`tokenizer.model` (its ids are the model's), the BOS token before every
prompt as `tokenizer_config.json` says.
"""

import numpy as np

from keras_attention.convert.checkpoint import CheckpointError
from keras_attention.convert.ids import make_id_map, pieces, reorder_rows
from keras_attention.data.tokenizers import MappedSubwordTokenizer
from keras_attention.models import build_transformer_lm

MODEL_TYPES = ("llama", "mistral")
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")
TASK = "language_model"
BUILDER = build_transformer_lm


def _rope(checkpoint):
    """`(rope_theta, linear scaling factor)` from the config, whichever way
    transformers wrote it (`rope_theta` and `rope_scaling`, or transformers
    5's `rope_parameters`)."""
    config = checkpoint.config
    parameters = dict(config.get("rope_scaling") or {})
    parameters.update(config.get("rope_parameters") or {})
    theta = parameters.get("rope_theta", config.get("rope_theta", 10000.0))
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    if kind == "default":
        return float(theta), 1.0
    if kind == "linear":
        return float(theta), float(parameters["factor"])
    key = "rope_parameters" if "rope_parameters" in config else "rope_scaling"
    checkpoint.refuse(key, config[key], "has a rope_type that is not supported (default, linear)")


def _spm_vocabulary(checkpoint):
    import sentencepiece

    path = checkpoint.file("tokenizer.model")
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as error:
        raise CheckpointError(f"{path} is not a SentencePiece model: {error}") from None
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())], processor


def read(checkpoint):
    """`(builder_arguments, sides)`, `sides` mapping "text" to
    `(vocabulary, id_map)`."""
    config = checkpoint.config
    if not checkpoint.file("tokenizer.model", required=False).is_file():
        raise CheckpointError(
            f"{checkpoint.folder} has no tokenizer.model (SentencePiece): a byte-level BPE "
            "tokenizer (tokenizer.json alone, as Llama 3's) is not supported yet"
        )
    vocabulary, processor = _spm_vocabulary(checkpoint)
    size = config["vocab_size"]
    if size != len(vocabulary):
        checkpoint.refuse("vocab_size", size, f"but tokenizer.model has {len(vocabulary)} pieces")
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
    theta, scaling = _rope(checkpoint)
    bos = config.get("bos_token_id", processor.bos_id())
    eos = config.get("eos_token_id", processor.eos_id())
    if isinstance(eos, list):
        checkpoint.refuse("eos_token_id", eos, "names several end tokens; one is supported")
    unknown = processor.unk_id()
    if not checkpoint.tokenizer_config.get("add_bos_token", True):
        raise CheckpointError(
            f"{checkpoint.folder / 'tokenizer_config.json'}: add_bos_token=false is not supported"
        )
    if checkpoint.tokenizer_config.get("add_eos_token", False):
        raise CheckpointError(
            f"{checkpoint.folder / 'tokenizer_config.json'}: add_eos_token=true is not supported"
        )
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
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
        use_bias=bool(config.get("attention_bias", False)),
        window_size=window if checkpoint.config.get("model_type") == "mistral" else None,
        scale_embeddings=False,
        tie_output_embeddings=bool(config.get("tie_word_embeddings", False)),
    )
    return arguments, {"text": (vocabulary, make_id_map(size, None, bos, eos, unknown))}


def tokenizers(checkpoint, sides):
    vocabulary, id_map = sides["text"]
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
    width, hidden, bias = model.model_dim, model.intermediate_dim, model.use_bias
    heads, kv_heads = model.num_heads, model.num_key_value_heads
    head_dim = width // heads
    embedding = weights.take("model.embed_tokens.weight", (len(vocabulary), width))
    model.token_embedding.set_weights([reorder_rows(embedding, id_map)])
    if model.output_projection is None:
        if "lm_head.weight" in weights:
            if not np.array_equal(weights.take("lm_head.weight", embedding.shape), embedding):
                raise CheckpointError(
                    f"{weights.source}: tie_word_embeddings is true but lm_head.weight differs "
                    "from model.embed_tokens.weight"
                )
    else:
        head = weights.take("lm_head.weight", (len(vocabulary), width))
        zeros = np.zeros(len(id_map), np.float32)  # the Dense's bias: Llama has none
        model.output_projection.set_weights([reorder_rows(head, id_map).T, zeros])
    model.decoder.final_norm.set_weights(weights.norm("model.norm", width, bias=False))
    for index, block in enumerate(model.decoder.blocks):
        prefix = f"model.layers.{index}"
        attention, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        widths = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        qkv = weights.dense([f"{attention}.{name}_proj" for name in "qkv"], width, widths, bias)
        block.self_attention.qkv_projection.set_weights(qkv)
        block.self_attention.output_projection.set_weights(
            weights.dense(f"{attention}.o_proj", width, width, bias)
        )
        block.self_attention_norm.set_weights(
            weights.norm(f"{prefix}.input_layernorm", width, bias=False)
        )
        block.feed_forward_gate.set_weights(weights.dense(f"{mlp}.gate_proj", width, hidden, bias))
        block.feed_forward_intermediate.set_weights(
            weights.dense(f"{mlp}.up_proj", width, hidden, bias)
        )
        block.feed_forward_output.set_weights(
            weights.dense(f"{mlp}.down_proj", hidden, width, bias)
        )
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
    return {
        "beam_size": int(checkpoint.setting("num_beams", 1)),
        "max_length": min(max_length, positions // 2),
    }
