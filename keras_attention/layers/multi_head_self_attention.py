import keras
from keras import ops

from keras_attention.layers._attention import (
    alibi_bias,
    alibi_slopes,
    causal_mask,
    check_mask,
    key_mask,
    merge_masks,
)
from keras_attention.layers._multi_head import MultiHeadAttentionBase
from keras_attention.layers.rotary_embedding import RotaryEmbedding, check_scaling_factor
from keras_attention.utils import check_choice, check_number, pack_outputs, slice_update

POSITIONS = (None, "rotary", "alibi")


def check_bias(bias, query_length, key_length):
    """An `attention_bias`, checked: None, or a float tensor of rank 4 that
    broadcasts to `[B, H, Tq, Tk]` (its static query and key sizes 1 or
    those of the scores)."""
    if bias is None:
        return None
    dtype = keras.backend.standardize_dtype(bias.dtype)
    shape = tuple(bias.shape)
    fits = all(
        got in (None, 1) or want is None or got == want
        for got, want in zip(shape[2:], (query_length, key_length), strict=False)
    )
    if "float" not in dtype or len(shape) != 4 or not fits:
        raise ValueError(
            "`attention_bias` must be a float tensor that broadcasts to the scores "
            f"[B, H, {query_length}, {key_length}]. Received: dtype {dtype}, shape {shape}"
        )
    return bias


def check_positions(positions, rotary_max_wavelength, rotary_scaling_factor):
    """The positions inside self-attention, checked: `positions` one of
    `POSITIONS`, the rotary wavelength > 1 and scaling factor (or factors) >= 1."""
    return (
        check_choice("positions", positions, POSITIONS),
        check_number("rotary_max_wavelength", rotary_max_wavelength, above=1),
        check_scaling_factor("rotary_scaling_factor", rotary_scaling_factor),
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadSelfAttention(MultiHeadAttentionBase):
    """Multi-head scaled dot-product self-attention ("Attention Is All You Need").

    Every position of `x` is projected to a query, a key and a value (one
    fused projection), each query scores every key, the scores are divided
    by sqrt(d_k) and softmaxed, the values are summed with those weights, and
    the heads are concatenated and projected back to the model width.

    Args:
        num_heads: int, number of attention heads.
        key_dim: int, size of each head's query and key. Defaults to
            `model_width // num_heads`, which then must divide evenly.
        value_dim: int, size of each head's value. Defaults to `key_dim`.
        dropout: float in [0, 1), dropout on the attention weights. Default 0.
        use_bias: bool, whether the projections have biases. Default True.
        causal: bool, whether position i may attend only to positions <= i
            (decoder self-attention). Default False.
        chunk_size: optional int. None (the default) computes the scores of
            every query against every key at once, `[B, H, T, T]`. An int
            computes the same attention in blocks of that many queries and
            keys, with an online softmax and a backward pass that recomputes
            each block's scores, so memory grows linearly with T (for long
            sequences). With `causal`, blocks above the diagonal are skipped.
            A call that asks for `return_attention_scores` or uses `cache`
            takes the dense path.
        num_key_value_heads: optional int dividing `num_heads`: grouped-query
            attention (Ainslie et al. 2023), each key/value head shared by
            `num_heads // num_key_value_heads` query heads in a row; 1 is
            multi-query attention (Shazeer 2019). The KV cache then holds
            only these heads. Default None: one per query head.
        sliding_window: optional int W: sliding-window (local) attention, query
            i attends only to keys j with |i - j| < W (with `causal`, itself
            and the W - 1 before it), as Keras core's `sliding_window`. In
            blocks, the blocks wholly outside the window are skipped, so
            time grows as T * W. Default None: every key.
        use_gate: bool, gated attention (Qiu et al. 2025): each head's output
            is multiplied by a sigmoid of a projection of `x` before the
            output projection, as Keras core's `use_gate`. Default False.
        positions: None (the default: positions, if any, are in `x`),
            `"rotary"`: each query and key is turned by its position
            (`RotaryEmbedding`), so the scores see relative positions, or
            `"alibi"` (Press et al. 2022): `-slope_h * |i - j|` is added to
            head h's score of query i for key j, with the paper's slopes (in
            blocks, block by block: no `[T, T]` tensor). Both are right with
            a cache (positions from `cache_index`) and in blocks.
        rotary_max_wavelength, rotary_scaling_factor: the `RotaryEmbedding`'s
            `max_wavelength` (default 10000) and `scaling_factor` (linear
            position interpolation, or a factor per pair of features;
            default 1.0), with `positions="rotary"`.
        kernel_initializer, bias_initializer: initializers of the projections.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, D]` input sequence.
        padding_mask: optional bool `[B, T]`, True at real tokens; padded keys
            get weight 0. In cache mode it covers the cache: `[B, max_length]`.
        attention_mask: optional bool `[B, T, T]` (`[B, T, max_length]` in cache
            mode), True where query i may attend to key j.
        cache: optional `(key_cache, value_cache)`, each `[B, H_kv, max_length, d]`,
            from `initial_cache()` or a previous call. The keys and values of
            `x` are written at `cache_index` and `x`'s queries attend to all
            cached positions up to their own (cache mode is always causal).
        cache_index: int scalar (may be a tensor), position of `x[:, 0]`.
        training: bool, whether dropout is active.
        return_attention_scores: bool, also return the attention weights.
        attention_bias: optional float tensor broadcastable to
            `[B, H, T, T]` (`[B, H, T, max_length]` in cache mode), added to
            the scores before the softmax, as `RelativePositionBias` gives
            it (T5's and MPNet's relative positions); with ALiBi, added to
            its bias. Not with `chunk_size` (the blocked path adds no bias
            but ALiBi's): a call with both is refused, unless it asks for
            `return_attention_scores`, which takes the dense path.
        mask: Keras implicit mask of `x` (e.g. from `Embedding(mask_zero=True)`),
            filled in by Keras; combined with `padding_mask`.

    Returns:
        `output [B, T, D]`; then the weights `[B, H, T, T_keys]` if
        `return_attention_scores`; then the updated cache if `cache` was given.

    Example:

    >>> x = keras.random.normal((2, 5, 16))
    >>> layer = MultiHeadSelfAttention(num_heads=4, causal=True)
    >>> output, scores = layer(x, return_attention_scores=True)
    >>> tuple(output.shape), tuple(scores.shape)
    ((2, 5, 16), (2, 4, 5, 5))
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        causal=False,
        chunk_size=None,
        num_key_value_heads=None,
        sliding_window=None,
        use_gate=False,
        positions=None,
        rotary_max_wavelength=10000.0,
        rotary_scaling_factor=1.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(
            num_heads=num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            dropout=dropout,
            use_bias=use_bias,
            chunk_size=chunk_size,
            num_key_value_heads=num_key_value_heads,
            sliding_window=sliding_window,
            use_gate=use_gate,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            **kwargs,
        )
        self.causal = bool(causal)
        self.positions, self.rotary_max_wavelength, self.rotary_scaling_factor = check_positions(
            positions, rotary_max_wavelength, rotary_scaling_factor
        )
        self.rotary_embedding = None
        if self.positions == "rotary":
            self.rotary_embedding = RotaryEmbedding(
                self.rotary_max_wavelength,
                self.rotary_scaling_factor,
                dtype=self.dtype_policy,
                name="rotary_embedding",
            )

    def build(self, x_shape):
        model_dim = x_shape[-1]
        self._key_dim, self._value_dim = self._head_dims(model_dim)
        if self.positions == "rotary" and self._key_dim % 2:
            raise ValueError(
                "positions='rotary' turns pairs of features: each head's key size must be "
                f"even. Received: key_dim={self._key_dim}"
            )
        # Step 1: one matrix multiplication gives Q, K and V for every head
        # (W^Q, W^K and W^V side by side; K and V for the H_kv heads only).
        self._qkv_widths = [
            self.num_heads * self._key_dim,
            self._key_value_heads * self._key_dim,
            self._key_value_heads * self._value_dim,
        ]
        self.qkv_projection = self._dense(sum(self._qkv_widths), "qkv_projection")
        self.qkv_projection.build(x_shape)
        self._build_output_projection(x_shape)

    def call(
        self,
        x,
        padding_mask=None,
        attention_mask=None,
        cache=None,
        cache_index=None,
        training=None,
        return_attention_scores=False,
        attention_bias=None,
        mask=None,
    ):
        batch_size, static_length = x.shape[0], x.shape[1]
        key_length = static_length if cache is None else cache[0].shape[2]
        padding_mask = check_mask("padding_mask", padding_mask, 2, (batch_size, key_length))
        attention_mask = check_mask(
            "attention_mask", attention_mask, 3, (batch_size, static_length, key_length)
        )
        attention_bias = check_bias(attention_bias, static_length, key_length)

        qkv = self.qkv_projection(x)  # [B, T, H * d_k + H_kv * (d_k + d_v)]
        query_width, key_width, _ = self._qkv_widths
        query, key, value = ops.split(qkv, [query_width, query_width + key_width], axis=-1)
        query = self._split_heads(query, self._key_dim)  # [B, T, H, d_k]
        key = self._split_heads(key, self._key_dim, self._key_value_heads)  # [B, T, H_kv, d_k]
        value = self._split_heads(value, self._value_dim, self._key_value_heads)
        if self.rotary_embedding is not None:
            # Each query and key turned by its own position.
            start = 0 if cache is None else cache_index
            query = self.rotary_embedding(query, start_index=start)
            key = self.rotary_embedding(key, start_index=start)

        length = ops.shape(x)[1]
        slopes = alibi_slopes(self.num_heads) if self.positions == "alibi" else None
        if cache is None:
            padding_mask = merge_masks(padding_mask, mask)
            if self._uses_chunks(return_attention_scores):
                if attention_bias is not None:
                    raise ValueError(
                        "`attention_bias` is not supported with `chunk_size`: the attention in "
                        f"blocks adds no bias but ALiBi's. Received: chunk_size={self.chunk_size}"
                    )
                return self._attend_in_chunks(
                    x,
                    query,
                    key,
                    value,
                    padding_mask,
                    attention_mask,
                    self.causal,
                    training,
                    alibi_slopes=slopes,
                )
            future_mask = causal_mask(length, length) if self.causal else None
            window = self._window_mask(length, length)
        else:
            if cache_index is None:
                raise ValueError("`cache_index` is required when `cache` is given.")
            # Keep the keys and values of earlier steps; add this step's. The
            # cache is heads first, [B, H_kv, max_length, d], as the products read it.
            key_cache, value_cache = cache
            start = [0, 0, cache_index, 0]
            key = slice_update(key_cache, start, self._heads_first(key, key_cache.dtype))
            value = slice_update(value_cache, start, self._heads_first(value, value_cache.dtype))
            cache = (key, value)
            # Positions after this step are not written yet: always causal.
            future_mask = causal_mask(length, ops.shape(key)[2], cache_index)
            window = self._window_mask(length, ops.shape(key)[2], cache_index)

        mask = merge_masks(key_mask(padding_mask, attention_mask), future_mask, window)
        bias = None
        if slopes is not None:
            start = 0 if cache is None else cache_index
            key_length = ops.shape(key)[2 if cache is not None else 1]
            bias = alibi_bias(slopes, ops.arange(length) + start, ops.arange(key_length))
        if attention_bias is not None:
            attention_bias = ops.cast(attention_bias, "float32")
            bias = attention_bias if bias is None else bias + attention_bias
        output, weights = self._attend(
            x, query, key, value, mask, training, heads_first=cache is not None, bias=bias
        )
        return pack_outputs(output, weights if return_attention_scores else None, cache)

    def initial_cache(self, batch_size, max_length):
        """An empty `(key_cache, value_cache)`, each `[B, H_kv, max_length, d]`."""
        if not self.built:
            raise ValueError("Build the layer (call it once) before asking for a cache.")
        dtype, heads = self.compute_dtype, self._key_value_heads
        return (
            ops.zeros((batch_size, heads, max_length, self._key_dim), dtype),
            ops.zeros((batch_size, heads, max_length, self._value_dim), dtype),
        )

    @staticmethod
    def _heads_first(x, dtype):
        """`[B, T, H, d]` -> `[B, H, T, d]` in `dtype`."""
        return ops.cast(ops.transpose(x, (0, 2, 1, 3)), dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "causal": self.causal,
                "positions": self.positions,
                "rotary_max_wavelength": self.rotary_max_wavelength,
                "rotary_scaling_factor": self.rotary_scaling_factor,
            }
        )
        return config

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
