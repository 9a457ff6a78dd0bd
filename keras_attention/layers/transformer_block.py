import keras

from keras_attention.layers._transformer import TransformerBlockBase
from keras_attention.layers.multi_head_self_attention import MultiHeadSelfAttention


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerBlock(TransformerBlockBase):
    """One encoder layer of "Attention Is All You Need".

    Self-attention, then a position-wise feed-forward network; each sub-layer
    has a residual connection and layer normalisation around it. By default
    the norm comes after the residual sum, as in the paper (post-norm);
    `norm_first=True` normalises each sub-layer's input instead (pre-norm,
    as in GPT-2 and most deep models, which then need a final norm).

    Args:
        num_heads: int, attention heads; must divide the model width.
        intermediate_dim: int, hidden width of the feed-forward network.
        dropout: float in [0, 1), dropout on each sub-layer's output before
            the residual sum. Default 0.1, as in the paper.
        attention_dropout: float in [0, 1), dropout on the attention weights.
            Default 0.
        causal: bool, whether position i attends only to positions <= i.
        norm_first: bool, pre-norm instead of the paper's post-norm.
        chunk_size: optional int, self-attention in blocks of that many
            positions, in memory linear in T (see `MultiHeadSelfAttention`).
            Default None (dense).
        num_key_value_heads, sliding_window, use_gate, positions,
            rotary_max_wavelength, rotary_scaling_factor: grouped-query
            heads, a sliding window, an output gate and rotary or ALiBi
            positions on the self-attention; see `MultiHeadSelfAttention`.
        normalization: `"layer_norm"` (default, the paper's) or `"rms_norm"`
            (RMS normalisation, as in Llama) around every sub-layer.
        feed_forward: `"dense"` (default: two layers, `activation` between)
            or `"swiglu"`: `(silu(x W_gate) * x W1) W2`, as in Llama.
        use_bias: bool, whether the attention and feed-forward projections
            have biases. Default True.
        activation: feed-forward activation. Default `"relu"`.
        layer_norm_epsilon: float, default 1e-6.
        kernel_initializer, bias_initializer: initializers of the dense layers.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        x: `[B, T, D]`.
        padding_mask: optional bool `[B, T]`, True at real tokens.
        attention_mask: optional bool `[B, T, T]`.
        training: bool, whether dropout is active.
        return_attention_scores: bool, also return the weights `[B, H, T, T]`.
        attention_bias: optional float tensor broadcastable to
            `[B, H, T, T]`, added to the self-attention's scores (a
            `RelativePositionBias`; see `MultiHeadSelfAttention`).
        mask: Keras implicit mask of `x`, filled in by Keras; combined with
            `padding_mask`.

    Returns:
        `[B, T, D]`, and the attention weights if `return_attention_scores`.

    Example:

    >>> x = keras.random.normal((2, 5, 16))
    >>> tuple(TransformerBlock(num_heads=4, intermediate_dim=32)(x).shape)
    (2, 5, 16)
    """

    def __init__(
        self, num_heads, intermediate_dim, dropout=0.1, causal=False, norm_first=False, **kwargs
    ):
        super().__init__(
            num_heads, intermediate_dim, dropout=dropout, norm_first=norm_first, **kwargs
        )
        self.causal = bool(causal)

    def build(self, x_shape):
        model_dim = x_shape[-1]
        self._check_width(model_dim)
        self.self_attention = MultiHeadSelfAttention(
            causal=self.causal, name="self_attention", **self._self_attention_kwargs()
        )
        self.self_attention.build(x_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.self_attention_norm = self._layer_norm("self_attention_norm", model_dim)
        self._build_feed_forward(model_dim)

    def call(
        self,
        x,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        attention_bias=None,
        mask=None,
    ):
        outputs = self.self_attention(
            self._sublayer_input(x, self.self_attention_norm),
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            mask=mask,
            training=training,
            return_attention_scores=return_attention_scores,
            attention_bias=attention_bias,
        )
        y = outputs[0] if return_attention_scores else outputs
        x = self._add_and_norm(
            x, y, self.self_attention_norm, self.self_attention_dropout, training
        )
        x = self._feed_forward(x, training)
        return (x, outputs[1]) if return_attention_scores else x

    def get_config(self):
        config = super().get_config()
        config["causal"] = self.causal
        return config

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
