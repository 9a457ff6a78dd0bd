"""Decoder-only generation, ours against KerasHub's `GPT2CausalLM`, as the
output grows.

    python -m benchmarks generation            # 32, 64, 128, 256 new tokens
    python -m benchmarks generation --smoke    # a few seconds: checks it runs

Both models have the same sizes (2 layers, d_model 256, 4 heads, FF 1024,
learned positions, a 1,000-token vocabulary, no dropout) and generate
greedily for a batch of 8 prompts of 8 tokens, to the full length (no end
token), as compiled graphs: KerasHub's `generate` after
`compile(sampler="greedy")` (its generate function is a `tf.function`,
without XLA by default here) and after `compile(sampler="greedy",
jit_compile=True)`, ours `decoding.greedy_search` in a `tf.function`, with
and without XLA. "ours faster" divides the best of KerasHub's two by the
best of ours.

Both run the model on one new token a step with a KV cache, and both
attend over the whole cache buffer every step (masking what is not written
yet), so a step costs more as the buffer grows. Ours keeps its cache heads
first, `[B, H, length, d]`, the order the attention products read it in;
kept `[B, length, H, d]` (as it was, and as KerasHub keeps it), every step
copies the whole cache into that order, and the rate at 256 new tokens fell
to 54% of the rate at 32. The table shows tokens per second (new tokens x
batch / median seconds), ours over KerasHub's, and each rate over its own
at 32 new tokens.
"""

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from benchmarks import measure
from keras_attention import decoding
from keras_attention.models import build_transformer_lm

SIZES = dict(num_layers=2, model_dim=256, num_heads=4, intermediate_dim=1024)
SMOKE_SIZES = dict(num_layers=1, model_dim=16, num_heads=2, intermediate_dim=32)
VOCABULARY_SIZE = 1000
PROMPT_LENGTH = 8


# Llama's block at the same sizes: pre-norm RMS norms, SwiGLU, rotary
# positions, 2 key/value heads for 4 query heads, no biases.
LLAMA_SIZES = dict(SIZES, intermediate_dim=704, num_key_value_heads=2)
SMOKE_LLAMA_SIZES = dict(SMOKE_SIZES, num_key_value_heads=1)


def gpt2_pair(sizes, longest):
    """Ours with learned positions, and KerasHub's `GPT2Backbone` of the same sizes."""
    ours = build_transformer_lm(
        VOCABULARY_SIZE,
        dropout=0.0,
        positions="learned",
        max_position_embeddings=longest + 1,
        **sizes,
    )
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCABULARY_SIZE,
        num_layers=sizes["num_layers"],
        num_heads=sizes["num_heads"],
        hidden_dim=sizes["model_dim"],
        intermediate_dim=sizes["intermediate_dim"],
        dropout=0.0,
        max_sequence_length=longest,
    )
    return ours, backbone, keras_hub.models.GPT2CausalLM


def llama_pair(sizes, longest):
    """Our `modern` preset and KerasHub's `LlamaBackbone`, built from the same
    sizes (random weights: only the speed is compared)."""
    ours = build_transformer_lm(VOCABULARY_SIZE, preset="modern", dropout=0.0, **sizes)
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=VOCABULARY_SIZE,
        num_layers=sizes["num_layers"],
        num_query_heads=sizes["num_heads"],
        hidden_dim=sizes["model_dim"],
        intermediate_dim=sizes["intermediate_dim"],
        num_key_value_heads=sizes["num_key_value_heads"],
        dropout=0.0,
    )
    return ours, backbone, keras_hub.models.LlamaCausalLM


PEERS = {"gpt2": gpt2_pair, "llama": llama_pair}


REPEATS = 5
NEW_TOKENS, BATCH_SIZE = (32, 64, 128, 256), 8
SMOKE_NEW_TOKENS, SMOKE_BATCH_SIZE = (4, 8), 2


def run(smoke, repeats):
    if smoke:
        return {"rows": race(SMOKE_NEW_TOKENS, SMOKE_BATCH_SIZE, repeats, SMOKE_SIZES)}
    return {"rows": race(NEW_TOKENS, BATCH_SIZE, repeats, SIZES)}


def race(new_token_counts, batch_size, repeats, sizes, peer="gpt2"):
    longest = PROMPT_LENGTH + max(new_token_counts)
    keras.utils.set_random_seed(0)
    ours, backbone, causal_lm = PEERS[peer](sizes, longest)
    # KerasHub's default compile (no XLA on this backend), and with XLA.
    peer = causal_lm(backbone=backbone, preprocessor=None)
    peer.compile(sampler="greedy")
    peer_xla = causal_lm(backbone=backbone, preprocessor=None)
    peer_xla.compile(sampler="greedy", jit_compile=True)
    random = np.random.default_rng(0)
    prompt = random.integers(3, VOCABULARY_SIZE, (batch_size, PROMPT_LENGTH)).astype("int32")

    rows = []
    for new_tokens in new_token_counts:
        length = PROMPT_LENGTH + new_tokens
        peer_inputs = {
            "token_ids": np.pad(prompt, [[0, 0], [0, new_tokens]]),
            "padding_mask": np.arange(length)[None, :].repeat(batch_size, 0) < PROMPT_LENGTH,
        }

        def greedy(prompt, new_tokens=new_tokens):
            return decoding.greedy_search(ours, prompt, new_tokens, end_id=-1)

        ours_graph = tf.function(greedy)
        ours_xla = tf.function(greedy, jit_compile=True)
        contenders = {
            "ours": lambda f=ours_graph: f(prompt).numpy(),
            "ours_xla": lambda f=ours_xla: f(prompt).numpy(),
            "keras_hub": lambda inputs=peer_inputs: peer.generate(inputs, stop_token_ids=None),
            "keras_hub_xla": lambda inputs=peer_inputs: peer_xla.generate(
                inputs, stop_token_ids=None
            ),
        }
        for name, generate in contenders.items():
            output = generate()
            shape = np.shape(output["token_ids"] if name.startswith("keras_hub") else output)
            if shape != (batch_size, length):
                raise RuntimeError(f"{name} generated {shape}, not {(batch_size, length)}.")
        seconds = measure.race(contenders, repeats, warmup=1)
        row = {
            "new_tokens": new_tokens,
            "batch_size": batch_size,
        }
        for name, value in seconds.items():
            row[f"{name}_s"] = value
            row[f"{name}_tokens_per_s"] = new_tokens * batch_size / value
        # The best of each: ours with or without XLA, KerasHub's likewise.
        best_peer = min(seconds["keras_hub"], seconds["keras_hub_xla"])
        row["ours_over_keras_hub"] = best_peer / min(seconds["ours"], seconds["ours_xla"])
        rows.append(row)
    first = rows[0]
    for row in rows:
        for name in contenders:
            key = f"{name}_tokens_per_s"
            row[f"{name}_rate_vs_first"] = row[key] / first[key]
    return rows


COLUMNS = [
    ("new_tokens", "new tokens", "d"),
    ("ours_tokens_per_s", "ours tok/s", ".0f"),
    ("ours_xla_tokens_per_s", "ours XLA tok/s", ".0f"),
    ("keras_hub_tokens_per_s", "KerasHub tok/s", ".0f"),
    ("keras_hub_xla_tokens_per_s", "KerasHub XLA tok/s", ".0f"),
    ("ours_over_keras_hub", "ours faster", ".2f"),
    ("ours_rate_vs_first", "ours rate vs 32", ".2f"),
    ("ours_xla_rate_vs_first", "ours XLA rate vs 32", ".2f"),
    ("keras_hub_rate_vs_first", "KerasHub rate vs 32", ".2f"),
    ("keras_hub_xla_rate_vs_first", "KerasHub XLA rate vs 32", ".2f"),
]


TABLES = [("greedy generation, ours against KerasHub GPT2CausalLM", "rows", COLUMNS)]


if __name__ == "__main__":
    from benchmarks import section

    section.main("generation")
