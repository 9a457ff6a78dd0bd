"""The RNN encoder-decoder with attention, as the illustrated explanation draws it.

The encoder hands the decoder every hidden state, not just the last one. At
each step the decoder RNN takes the previous word's embedding and produces a
hidden state h_t; the attention layer scores every encoder hidden state
against h_t, softmaxes the scores and sums the hidden states with those
weights into the context c_t; h_t and c_t are concatenated and passed through
a feed-forward layer (Luong's attentional hidden state tanh(W_c [c_t; h_t]))
whose output predicts the word. With input feeding, that attentional state is
also fed to the next step's RNN input.
"""

import keras
from keras import ops

from keras_attention.layers import BahdanauAttention, Dropout, LuongAttention
from keras_attention.models.zoo_model import (
    ZooModel,
    padding_mask,
    pop_dtype_policy,
    resolve_preset,
)
from keras_attention.utils import Layer, check_choice, check_positive_int, check_rate

PRESETS = {
    "tiny": dict(embedding_dim=32, units=64),
    # RNNsearch of Bahdanau et al. 2015: 620-wide embeddings, 1000 GRU units.
    "rnnsearch": dict(embedding_dim=620, units=1000, cell="gru", attention="bahdanau"),
}
CELLS = {"gru": keras.layers.GRU, "lstm": keras.layers.LSTM}
ATTENTIONS = ("bahdanau", "luong")


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionDecoder(Layer):
    """The decoder RNN with attention, one step at a time (`step`) or over a
    whole target sequence (`call`, a scan of `step`).

    Args:
        units: int, RNN and attentional-state width.
        cell: `"gru"` or `"lstm"`.
        attention: `"bahdanau"` (additive) or `"luong"` (multiplicative).
        luong_score: Luong's score, `"general"`, `"dot"` or `"concat"`.
        input_feeding: bool, feed the previous attentional state to the RNN.
    """

    def __init__(
        self,
        units,
        cell="gru",
        attention="bahdanau",
        luong_score="general",
        input_feeding=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_choice("cell", cell, CELLS)
        check_choice("attention", attention, ATTENTIONS)
        self.units = check_positive_int("units", units)
        self.cell_type = cell
        self.attention_type = attention
        self.luong_score = luong_score
        self.input_feeding = bool(input_feeding)
        self.supports_masking = True
        cell_class = {"gru": keras.layers.GRUCell, "lstm": keras.layers.LSTMCell}[cell]
        self.cell = cell_class(units, dtype=self.dtype_policy, name="cell")
        self.attention = (
            BahdanauAttention(units, dtype=self.dtype_policy, name="attention")
            if attention == "bahdanau"
            else LuongAttention(score=luong_score, dtype=self.dtype_policy, name="attention")
        )
        self.attentional_dense = keras.layers.Dense(
            units,
            activation="tanh",
            use_bias=False,
            dtype=self.dtype_policy,
            name="attentional_dense",
        )

    def build(self, inputs_shape, encoder_outputs_shape):
        input_dim = inputs_shape[-1] + (self.units if self.input_feeding else 0)
        self.cell.build((None, input_dim))
        self.attention.build((None, self.units), encoder_outputs_shape)
        self.attentional_dense.build((None, self.units + encoder_outputs_shape[-1]))

    def initial_states(self, rnn_states):
        """The step states: the RNN's, then (input feeding) a zero attentional state."""
        states = list(rnn_states)
        if self.input_feeding:
            states.append(ops.zeros_like(rnn_states[0]))
        return states

    def step(self, inputs, states, encoder_outputs, source_mask, training=None):
        """One decoder step.

        Args:
            inputs: `[B, E]`, the previous word's embedding.
            states: list from `initial_states` or the previous step.
            encoder_outputs: `[B, S, De]`, every encoder hidden state.
            source_mask: bool `[B, S]`.

        Returns:
            `(attentional_state [B, units], attention_weights [B, S], states)`.
        """
        if self.input_feeding:
            rnn_states, previous = states[:-1], states[-1]
            inputs = ops.concatenate([inputs, previous], axis=-1)
        else:
            rnn_states = states
        # 1-2. The RNN takes the embedding and its state: a new hidden state h_t.
        hidden, rnn_states = self.cell(inputs, rnn_states, training=training)
        rnn_states = list(rnn_states) if isinstance(rnn_states, (list, tuple)) else [rnn_states]
        # 3. Score every encoder hidden state against h_t: the context c_t.
        context, weights = self.attention(
            hidden, encoder_outputs, value_mask=source_mask, return_attention_scores=True
        )
        # 4-5. Concatenate h_t and c_t, feed-forward layer: the attentional state.
        attentional = self.attentional_dense(ops.concatenate([context, hidden], axis=-1))
        states = rnn_states + [attentional] if self.input_feeding else rnn_states
        return attentional, weights, states

    def call(
        self,
        inputs,
        encoder_outputs,
        initial_states=None,
        source_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        """The whole target `[B, T, E]` -> attentional states `[B, T, units]`
        (and weights `[B, T, S]`)."""

        def one_step(carry, x_t):
            attentional, weights, states = self.step(
                x_t, carry["states"], encoder_outputs, source_mask, training=training
            )
            carry = {"states": states, "attentional": attentional, "weights": weights}
            # Keras's TensorFlow `scan` packs the per-step outputs like the
            # carry, so the outputs wanted are part of the carry.
            return carry, carry

        states = self.initial_states(initial_states)
        carry = {
            "states": states,
            "attentional": ops.zeros_like(states[0]),  # [B, units]
            "weights": ops.zeros_like(encoder_outputs[:, :, 0]),  # [B, S]
        }
        time_major = ops.transpose(inputs, (1, 0, 2))  # [T, B, E]
        _, outputs = ops.scan(one_step, carry, time_major)
        attentional, weights = outputs["attentional"], outputs["weights"]  # time major
        attentional = ops.transpose(attentional, (1, 0, 2))  # [B, T, units]
        if return_attention_scores:
            return attentional, ops.transpose(weights, (1, 0, 2))  # [B, T, S]
        return attentional

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "cell": self.cell_type,
                "attention": self.attention_type,
                "luong_score": self.luong_score,
                "input_feeding": self.input_feeding,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attention")
class Seq2SeqAttention(ZooModel):
    """RNN encoder-decoder with attention. Build it with `build_seq2seq_attention`.

    Inputs `{"source_ids": int [B, S], "target_ids": int [B, T]}` (padding id
    0), output logits `[B, T, V]` carrying the target padding mask.

    Args:
        source_vocabulary_size: int, number of source token ids (0 = padding).
        target_vocabulary_size: int, number of target token ids.
        embedding_dim: int, width of the token embeddings. Default 32.
        units: int, width of the encoder's and decoder's RNN state. Default 64.
        cell: str, `"gru"` or `"lstm"`. Default `"gru"`.
        bidirectional: bool, the encoder reads both ways (the two directions'
            states concatenated). Default True.
        attention: str, `"bahdanau"` (additive) or `"luong"`. Default
            `"bahdanau"`.
        luong_score: str, Luong's score: `"dot"`, `"general"` or `"concat"`.
            Default `"general"`.
        input_feeding: bool, Luong's input feeding: the last attentional
            vector goes into the next decoder step. Default False.
        dropout: float in [0, 1), on the attentional vector before the
            output projection. Default 0.0.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).
    """

    task = "translation"  # what `keras_attention.export` serves it as
    is_decoder_only = False  # see `keras_attention.decoding.Decodable`

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        embedding_dim=32,
        units=64,
        cell="gru",
        bidirectional=True,
        attention="bahdanau",
        luong_score="general",
        input_feeding=False,
        dropout=0.0,
        **kwargs,
    ):
        bidirectional, input_feeding = bool(bidirectional), bool(input_feeding)
        check_positive_int("source_vocabulary_size", source_vocabulary_size)
        check_positive_int("target_vocabulary_size", target_vocabulary_size)
        check_positive_int("embedding_dim", embedding_dim)
        check_positive_int("units", units)
        check_choice("cell", cell, CELLS)
        check_rate("dropout", dropout)
        policy = pop_dtype_policy(type(self), kwargs)

        # === Layers ===
        self.source_embedding = keras.layers.Embedding(
            source_vocabulary_size,
            embedding_dim,
            mask_zero=True,
            dtype=policy,
            name="source_embedding",
        )
        self.target_embedding = keras.layers.Embedding(
            target_vocabulary_size,
            embedding_dim,
            mask_zero=True,
            dtype=policy,
            name="target_embedding",
        )
        rnn = CELLS[cell](
            units, return_sequences=True, return_state=True, dtype=policy, name=f"encoder_{cell}"
        )
        self.encoder = (
            keras.layers.Bidirectional(rnn, dtype=policy, name="encoder") if bidirectional else rnn
        )
        # The decoder starts from the encoder's final state(s), through a
        # tanh layer (Bahdanau et al.: s_0 = tanh(W_s h_1 backward)).
        num_states = 2 if cell == "lstm" else 1
        self.bridges = [
            keras.layers.Dense(units, activation="tanh", dtype=policy, name=f"bridge_{i}")
            for i in range(num_states)
        ]
        self.decoder = AttentionDecoder(
            units,
            cell=cell,
            attention=attention,
            luong_score=luong_score,
            input_feeding=input_feeding,
            dtype=policy,
            name="decoder",
        )
        self.dropout_layer = Dropout(dropout, dtype=policy, name="dropout")
        self.output_projection = keras.layers.Dense(
            target_vocabulary_size, dtype=policy, name="logits"
        )

        # === Functional model ===
        source_ids = keras.Input((None,), dtype="int32", name="source_ids")
        target_ids = keras.Input((None,), dtype="int32", name="target_ids")
        encoder_outputs, rnn_states = self.encode(source_ids)
        logits = self.decode(target_ids, encoder_outputs, rnn_states, source_ids)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids}, outputs=logits, **kwargs
        )

        # === Config ===
        self._set_config(locals())

    @property
    def model_dim(self):
        """The width the warm-up learning-rate schedule scales with: the RNN's
        units (the Transformer's is its `model_dim`)."""
        return self.units

    def encode(self, source_ids, training=None):
        """Source ids -> (every encoder hidden state `[B, S, De]`, the decoder's
        initial RNN states)."""
        outputs = self.encoder(self.source_embedding(source_ids), training=training)
        encoder_outputs, final_states = outputs[0], outputs[1:]
        if len(self.bridges) == len(final_states):  # one direction
            halves = [[state] for state in final_states]
        else:  # forward and backward states, side by side
            n = len(self.bridges)
            halves = [[final_states[i], final_states[n + i]] for i in range(n)]
        rnn_states = [
            bridge(ops.concatenate(states, axis=-1))
            for bridge, states in zip(self.bridges, halves, strict=True)
        ]
        return encoder_outputs, rnn_states

    def decode(
        self,
        target_ids,
        encoder_outputs,
        rnn_states,
        source_ids,
        training=None,
        return_attention_scores=False,
    ):
        outputs = self.decoder(
            self.target_embedding(target_ids),
            encoder_outputs,
            initial_states=rnn_states,
            source_mask=padding_mask(source_ids),
            training=training,
            return_attention_scores=return_attention_scores,
        )
        attentional = outputs[0] if return_attention_scores else outputs
        logits = self.output_projection(self.dropout_layer(attentional, training=training))
        return (logits, outputs[1]) if return_attention_scores else logits

    def attention_scores(self, inputs):
        """`{"decoder_cross_attention": [[B, 1, T, S]]}`: one layer with one
        "head" (the same key as the Transformer's)."""
        source_ids, target_ids = inputs["source_ids"], inputs["target_ids"]
        encoder_outputs, rnn_states = self.encode(source_ids)
        _, weights = self.decode(
            target_ids, encoder_outputs, rnn_states, source_ids, return_attention_scores=True
        )
        return {"decoder_cross_attention": [ops.expand_dims(weights, 1)]}

    # --- Decoding (see keras_attention.decoding) ---

    def decoding_start(self, source_ids, max_length, use_cache=True):
        """The RNN state is the cache; without it the decoder reruns the
        prefix. The encoder's outputs and mask are fixed for a sentence:
        they sit under `"context"`, which beam search never reorders."""
        encoder_outputs, rnn_states = self.encode(source_ids)
        context = {"encoder_outputs": encoder_outputs, "mask": padding_mask(source_ids)}
        if use_cache:
            return {"context": context, "states": self.decoder.initial_states(rnn_states)}
        return {"context": context, "rnn_states": rnn_states}

    def decoding_step(self, token_ids, index, state):
        context = state["context"]
        if "states" not in state:
            attentional = self.decoder(
                self.target_embedding(token_ids),
                context["encoder_outputs"],
                initial_states=state["rnn_states"],
                source_mask=context["mask"],
            )
            logits = ops.take(self.output_projection(attentional), index, axis=1)
            return ops.cast(logits, "float32"), state
        token = ops.slice(token_ids, (0, index), (ops.shape(token_ids)[0], 1))  # [B, 1]
        attentional, _, states = self.decoder.step(
            self.target_embedding(token)[:, 0],
            state["states"],
            context["encoder_outputs"],
            context["mask"],
        )
        logits = ops.cast(self.output_projection(attentional), "float32")
        return logits, {**state, "states": states}


def build_seq2seq_attention(
    source_vocabulary_size, target_vocabulary_size=None, preset="tiny", **overrides
):
    """Builds an RNN encoder-decoder with attention.

    Args:
        source_vocabulary_size: int, number of source token ids (0 = padding).
        target_vocabulary_size: int, defaults to the source's.
        preset: `"tiny"` (embeddings 32, 64 units) or `"rnnsearch"`
            (Bahdanau et al. 2015: embeddings 620, 1000 GRU units).
        **overrides: any argument of `Seq2SeqAttention` (its Args say what each
            means), over the preset's: e.g. `units=128`.

    Returns:
        An uncompiled `Seq2SeqAttention`: `{"source_ids", "target_ids"}` ->
        logits `[B, T, V]`.

    Example:

    >>> model = build_seq2seq_attention(30, attention="luong", input_feeding=True)
    >>> ids = keras.ops.ones((2, 5), "int32")
    >>> tuple(model({"source_ids": ids, "target_ids": ids}).shape)
    (2, 5, 30)
    """
    return Seq2SeqAttention(
        source_vocabulary_size,
        target_vocabulary_size or source_vocabulary_size,
        **resolve_preset(PRESETS, preset, overrides),
    )
