import keras

from keras_attention.layers._attention import merge_masks
from keras_attention.layers._transformer import TransformerBlockBase
from keras_attention.layers.multi_head_cross_attention import MultiHeadCrossAttention
from keras_attention.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attention.utils import pack_outputs


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerDecoderBlock(TransformerBlockBase):
    """One decoder layer of "Attention Is All You Need".

    Masked (causal) self-attention over the target so far, then
    encoder-decoder attention whose keys and values come from the encoder
    output, then the position-wise feed-forward network; "Add & Norm" around
    each. Built without a context (`context=None` on the first call), the
    cross-attention is left out: a decoder-only (GPT-style) block.

    For incremental decoding pass `cache` (from `initial_cache()`) and
    `cache_index`: the new tokens' keys and values are appended to the cache
    and the updated cache is returned. `context_cache` (from
    `context_cache(context)`) saves projecting the encoder output each step.

    Args:
        num_heads: int, attention heads; must divide the model width.
        intermediate_dim: int, hidden width of the feed-forward network.
        dropout: float in [0, 1), dropout on each sub-layer's output before
            the residual sum. Default 0.1.
        attention_dropout: float in [0, 1), dropout on attention weights.
        norm_first: bool, pre-norm instead of the paper's post-norm.
        chunk_size: optional int, self- and cross-attention in blocks of
            that many positions, in memory linear in the lengths (see
            `MultiHeadSelfAttention`); incremental decoding (`cache`) stays
            dense. Default None (dense).
        num_key_value_heads, use_gate: grouped-query heads and an output
            gate on both attention layers; see `MultiHeadSelfAttention`.
        sliding_window, positions, rotary_max_wavelength, rotary_scaling_factor:
            a sliding window and rotary or ALiBi positions on the self-attention
            (the cross-attention reads the whole source, unturned).
        normalization: `"layer_norm"` (default, the paper's) or `"rms_norm"`
            (RMS normalisation, as in Llama) around every sub-layer.
        feed_forward: `"dense"` (default: two layers, `activation` between)
            or `"swiglu"`: `(silu(x W_gate) * x W1) W2`, as in Llama.
        use_bias: bool, whether the attention and feed-forward projections
            have biases. Default True.
        activation, layer_norm_epsilon, kernel_initializer, bias_initializer:
            as in `TransformerBlock`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, D]`, the (shifted) target embeddings.
        context: `[B, S, Dc]`, the encoder output, or None for a decoder-only
            block (or when `context_cache` is given).
        padding_mask: optional bool `[B, T]` (`[B, max_length]` in cache
            mode), True at real target tokens.
        context_mask: optional bool `[B, S]`, True at real source tokens.
            Filled in from the Keras implicit mask of `context`.
        cache, cache_index: the self-attention cache and the position of
            `x[:, 0]`, see `MultiHeadSelfAttention`.
        context_cache: optional `(key, value)` of the context.
        training: bool, whether dropout is active.
        return_attention_scores: bool, also return a dict with the weights
            `"self_attention"` `[B, H, T, T_keys]` and (with a context)
            `"cross_attention"` `[B, H, T, S]`.
        mask, x_mask: Keras implicit masks of `x`, filled in by Keras.

    Returns:
        `[B, T, D]`; then the weights dict if `return_attention_scores`; then
        the updated cache if `cache` was given.

    Example:

    >>> target = keras.random.normal((2, 3, 16))
    >>> encoder_output = keras.random.normal((2, 7, 16))
    >>> block = TransformerDecoderBlock(num_heads=4, intermediate_dim=32)
    >>> tuple(block(target, encoder_output).shape)
    (2, 3, 16)
    """

    def build(self, x_shape, context_shape=None):
        model_dim = x_shape[-1]
        self._check_width(model_dim)
        self.self_attention = MultiHeadSelfAttention(
            causal=True, name="self_attention", **self._self_attention_kwargs()
        )
        self.self_attention.build(x_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.self_attention_norm = self._layer_norm("self_attention_norm", model_dim)
        self.has_cross_attention = context_shape is not None
        if self.has_cross_attention:
            self.cross_attention = MultiHeadCrossAttention(
                name="cross_attention", **self._attention_kwargs()
            )
            self.cross_attention.build(x_shape, context_shape)
            self.cross_attention_dropout = self._dropout("cross_attention_dropout")
            self.cross_attention_norm = self._layer_norm("cross_attention_norm", model_dim)
        self._build_feed_forward(model_dim)

    def call(
        self,
        x,
        context=None,
        padding_mask=None,
        context_mask=None,
        cache=None,
        cache_index=None,
        context_cache=None,
        training=None,
        return_attention_scores=False,
        mask=None,
        x_mask=None,
    ):
        has_context = context is not None or context_cache is not None
        if has_context != self.has_cross_attention:
            raise ValueError(
                "This block was built "
                + ("with" if self.has_cross_attention else "without")
                + " a context (encoder output); call it the same way. Received: "
                + f"context={'None' if not has_context else 'a tensor'}"
            )
        if cache is None:
            padding_mask = merge_masks(padding_mask, mask, x_mask)
        weights = {}

        # 1. Masked self-attention: each target position sees those before it.
        outputs = self.self_attention(
            self._sublayer_input(x, self.self_attention_norm),
            padding_mask=padding_mask,
            cache=cache,
            cache_index=cache_index,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        y = outputs[0]
        if return_attention_scores:
            weights["self_attention"] = outputs[1]
        if cache is not None:
            cache = outputs[-1]
        x = self._add_and_norm(
            x, y, self.self_attention_norm, self.self_attention_dropout, training
        )

        # 2. Encoder-decoder attention: queries from here, keys and values
        #    from the encoder output.
        if self.has_cross_attention:
            y = self.cross_attention(
                self._sublayer_input(x, self.cross_attention_norm),
                context,
                context_mask=context_mask,
                context_cache=context_cache,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                y, weights["cross_attention"] = y
            x = self._add_and_norm(
                x, y, self.cross_attention_norm, self.cross_attention_dropout, training
            )

        # 3. Position-wise feed-forward network.
        x = self._feed_forward(x, training)

        return pack_outputs(x, weights if return_attention_scores else None, cache)

    def initial_cache(self, batch_size, max_length):
        """An empty self-attention cache, see `MultiHeadSelfAttention`."""
        return self.self_attention.initial_cache(batch_size, max_length)

    def context_cache(self, context):
        """The cross-attention keys and values of `context`, computed once."""
        return self.cross_attention.context_cache(context)

    def compute_output_shape(self, x_shape, context_shape=None):
        return tuple(x_shape)
