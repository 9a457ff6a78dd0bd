"""GPT-2: transformers' `GPT2LMHeadModel` into our `TransformerLM`.

What it is (transformers' `modeling_gpt2.py`): pre-norm blocks with layer
norms (`layer_norm_epsilon`) and a final one (`ln_f`), learned positions
(`wpe`, `n_positions` of them) added to the token embeddings (`wte`, not
scaled), a dense feed-forward network with `activation_function` (GPT-2's
`gelu_new`: GELU's tanh approximation), biases everywhere, the output tied
to the token embeddings. Its `Conv1D` layers store weights `[in, out]`
(a `Linear`'s transposed), and `c_attn` holds q, k and v side by side.
Tokenisation: byte-level BPE (`tokenizer.json`), no start token before a
prompt; `<|endoftext|>` ends a text.
"""

import numpy as np

from keras_attention.convert.byte_level_bpe import make_tokenizer, read_byte_level_bpe
from keras_attention.convert.ids import NO_ID, make_id_map, never_generated, reorder_rows
from keras_attention.models import build_transformer_lm

MODEL_TYPES = ("gpt2",)
ARCHITECTURES = ("GPT2LMHeadModel",)
TASK = "language_model"
BUILDER = build_transformer_lm
# transformers' names -> ours (`keras_attention.layers._transformer`).
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


def read(checkpoint):
    """`(builder_arguments, sides)`, `sides` mapping "text" to
    `(tokenizer.json as read, id_map)`."""
    config = checkpoint.config
    size = config["vocab_size"]
    tokenizer = read_byte_level_bpe(checkpoint, size)
    activation = config.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        checkpoint.refuse("activation_function", activation, f"is not one of {list(ACTIVATIONS)}")
    for key, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if config.get(key, supported) != supported:
            checkpoint.refuse(key, config[key], f"is not supported ({str(supported).lower()})")
    if not config.get("tie_word_embeddings", True):
        checkpoint.refuse("tie_word_embeddings", False, "is not supported (GPT-2 ties them)")
    eos = config.get("eos_token_id")
    if not isinstance(eos, int):
        checkpoint.refuse("eos_token_id", eos, "is not one token id")
    width = config["n_embd"]
    id_map = make_id_map(size, None, tokenizer["start"], eos, None)
    arguments = dict(
        num_layers=config["n_layer"],
        model_dim=width,
        num_heads=config["n_head"],
        intermediate_dim=config.get("n_inner") or 4 * width,
        dropout=float(config.get("attn_pdrop", 0.0)),
        norm_first=True,
        normalization="layer_norm",
        layer_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-5)),
        feed_forward="dense",
        activation=ACTIVATIONS[activation],
        positions="learned",
        max_position_embeddings=config["n_positions"],
        use_bias=True,
        scale_embeddings=False,
        tie_output_embeddings=True,
        # Where our ids 1-3 are no token of GPT-2's, a -inf bias keeps them
        # out of every softmax, so that scores are GPT-2's.
        output_bias=True,
    )
    return arguments, {"text": (tokenizer, id_map)}


def tokenizers(checkpoint, sides):
    tokenizer, id_map = sides["text"]
    return {"text": make_tokenizer(tokenizer, id_map)}


def load_weights(model, weights, sides):
    tokenizer, id_map = sides["text"]
    width, hidden = model.model_dim, model.intermediate_dim
    # GPT2LMHeadModel's names start with "transformer."; GPT2Model's do not.
    prefix = "transformer." if "transformer.wte.weight" in weights else ""
    embedding = weights.take(f"{prefix}wte.weight", (len(tokenizer["pieces"]), width))
    model.token_embedding.set_weights([reorder_rows(embedding, id_map)])
    if "lm_head.weight" in weights:
        weights.take("lm_head.weight", embedding.shape)  # tied: the same matrix
    missing = [i for i, checkpoint_id in enumerate(id_map) if checkpoint_id == NO_ID and i > 0]
    model.logits_bias.set_weights([never_generated(np.zeros(len(id_map)), missing)])
    positions = model.positional_encoding.max_position_embeddings
    model.positional_encoding.set_weights([weights.take(f"{prefix}wpe.weight", (positions, width))])
    model.decoder.final_norm.set_weights(weights.norm(f"{prefix}ln_f", width))
    for index, block in enumerate(model.decoder.blocks):
        layer = f"{prefix}h.{index}"
        block.self_attention_norm.set_weights(weights.norm(f"{layer}.ln_1", width))
        block.self_attention.qkv_projection.set_weights(
            conv1d(weights, f"{layer}.attn.c_attn", width, 3 * width)
        )
        block.self_attention.output_projection.set_weights(
            conv1d(weights, f"{layer}.attn.c_proj", width, width)
        )
        block.feed_forward_norm.set_weights(weights.norm(f"{layer}.ln_2", width))
        block.feed_forward_intermediate.set_weights(
            conv1d(weights, f"{layer}.mlp.c_fc", width, hidden)
        )
        block.feed_forward_output.set_weights(conv1d(weights, f"{layer}.mlp.c_proj", hidden, width))
        for buffer in ("attn.bias", "attn.masked_bias"):  # causal masks older files saved
            if f"{layer}.{buffer}" in weights:
                weights.skip(f"{layer}.{buffer}")
    weights.check_all_taken()


def conv1d(weights, name, shape_in, shape_out):
    """A `Conv1D`'s `[kernel [in, out], bias]`: already a Dense's layout.
    (`c_attn`'s outputs are q, k, v side by side, as our fused projection's.)"""
    return [
        weights.take(f"{name}.weight", (shape_in, shape_out)),
        weights.take(f"{name}.bias", (shape_out,)),
    ]


def run_settings(checkpoint):
    """The run's beam size, and the most tokens a completion adds:
    `generation_config.json`'s `max_new_tokens`, or 256, within half the
    model's positions."""
    max_length = int(checkpoint.generation_config.get("max_new_tokens") or 256)
    limit = min(max_length, int(checkpoint.config["n_positions"]) // 2)
    return {
        "beam_size": int(checkpoint.setting("num_beams", 1)),
        "max_input_length": limit,
        "max_decoding_length": limit,
    }
