"""What the encoder and decoder blocks share: "Add & Norm" around every
sub-layer and the position-wise feed-forward network.

Private to the package.
"""

import keras

from keras_attention.layers._multi_head import check_attention_options
from keras_attention.layers.dropout import Dropout
from keras_attention.layers.multi_head_self_attention import check_positions
from keras_attention.renamed import renamed_argument
from keras_attention.utils import (
    Layer,
    check_bool,
    check_choice,
    check_positive_int,
    check_rate,
    clone_initializer,
)

NORMALIZATIONS = ("layer_norm", "rms_norm")
FEED_FORWARDS = ("dense", "swiglu")


@keras.saving.register_keras_serializable(package="keras_attention")
def gelu_tanh(x):
    """GELU with the tanh approximation, GPT-2's `gelu_new`:
    `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`."""
    return keras.activations.gelu(x, approximate=True)


# Activations by name besides Keras' own.
ACTIVATIONS = {"gelu_tanh": gelu_tanh}


def normalization_layer(normalization, epsilon, dtype_policy, name):
    """`keras.layers.LayerNormalization` or `keras.layers.RMSNormalization`."""
    if normalization == "rms_norm":
        norm = keras.layers.RMSNormalization(epsilon=epsilon, dtype=dtype_policy, name=name)
        norm.supports_masking = True  # position by position, as LayerNormalization
        return norm
    return keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype_policy, name=name)


class TransformerBlockBase(Layer):
    """Arguments, residual connections, layer norms and the feed-forward net."""

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        attention_dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        norm_first=False,
        chunk_size=None,
        num_key_value_heads=None,
        sliding_window=None,
        use_gate=False,
        positions=None,
        rotary_max_wavelength=10000.0,
        rotary_scaling_factor=1.0,
        normalization="layer_norm",
        feed_forward="dense",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        sliding_window = renamed_argument(kwargs, "sliding_window", sliding_window)
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        self.dropout = check_rate("dropout", dropout)
        self.attention_dropout = check_rate("attention_dropout", attention_dropout)
        if isinstance(activation, str):
            activation = ACTIVATIONS.get(activation, activation)
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.norm_first = bool(norm_first)
        self.chunk_size = check_positive_int("chunk_size", chunk_size, allow_none=True)
        self.num_key_value_heads, self.sliding_window, self.use_gate = check_attention_options(
            self.num_heads, num_key_value_heads, sliding_window, use_gate
        )
        self.positions, self.rotary_max_wavelength, self.rotary_scaling_factor = check_positions(
            positions, rotary_max_wavelength, rotary_scaling_factor
        )
        self.normalization = check_choice("normalization", normalization, NORMALIZATIONS)
        self.feed_forward = check_choice("feed_forward", feed_forward, FEED_FORWARDS)
        self.use_bias = check_bool("use_bias", use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _check_width(self, model_dim):
        if model_dim % self.num_heads:
            raise ValueError(
                "`num_heads` must divide the model width (the last dimension of "
                f"the input). Received: num_heads={self.num_heads}, "
                f"model width={model_dim}"
            )

    def _self_attention_kwargs(self):
        """The self-attention's arguments: the cross-attention's, and the
        sliding window and the positions, which are about one sequence."""
        return dict(
            self._attention_kwargs(),
            sliding_window=self.sliding_window,
            positions=self.positions,
            rotary_max_wavelength=self.rotary_max_wavelength,
            rotary_scaling_factor=self.rotary_scaling_factor,
        )

    def _attention_kwargs(self):
        return dict(
            num_heads=self.num_heads,
            dropout=self.attention_dropout,
            chunk_size=self.chunk_size,
            num_key_value_heads=self.num_key_value_heads,
            use_gate=self.use_gate,
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
        )

    def _layer_norm(self, name, model_dim):
        """The norm around a sub-layer: layer normalisation (the paper's), or
        RMS normalisation (`x / rms(x) * g`, Zhang & Sennrich 2019, as in
        Llama), both in float32 under mixed precision."""
        norm = normalization_layer(
            self.normalization, self.layer_norm_epsilon, self.dtype_policy, name
        )
        norm.build((None, None, model_dim))
        return norm

    def _dropout(self, name):
        return Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _build_feed_forward(self, model_dim):
        """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike;
        with `feed_forward="swiglu"` (Shazeer 2020, as in Llama)
        FFN(x) = (silu(x W_gate) * x W1) W2."""

        def dense(units, activation, name):
            return keras.layers.Dense(
                units,
                activation=activation,
                use_bias=self.use_bias,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                bias_initializer=clone_initializer(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        swiglu = self.feed_forward == "swiglu"
        self.feed_forward_intermediate = dense(
            self.intermediate_dim, None if swiglu else self.activation, "feed_forward_intermediate"
        )
        self.feed_forward_intermediate.build((None, None, model_dim))
        self.feed_forward_gate = None
        if swiglu:
            self.feed_forward_gate = dense(self.intermediate_dim, "silu", "feed_forward_gate")
            self.feed_forward_gate.build((None, None, model_dim))
        self.feed_forward_output = dense(model_dim, None, "feed_forward_output")
        self.feed_forward_output.build((None, None, self.intermediate_dim))
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")
        self.feed_forward_norm = self._layer_norm("feed_forward_norm", model_dim)

    def _sublayer_input(self, x, norm):
        """Pre-norm normalises what goes into the sub-layer; post-norm does not."""
        return norm(x) if self.norm_first else x

    def _add_and_norm(self, x, sublayer_output, norm, dropout, training):
        """Residual connection, then layer norm (post-norm, as in the paper)."""
        x = x + dropout(sublayer_output, training=training)
        return x if self.norm_first else norm(x)

    def _feed_forward(self, x, training):
        y = self._sublayer_input(x, self.feed_forward_norm)
        hidden = self.feed_forward_intermediate(y)
        if self.feed_forward_gate is not None:
            hidden = self.feed_forward_gate(y) * hidden
        y = self.feed_forward_output(hidden)
        return self._add_and_norm(x, y, self.feed_forward_norm, self.feed_forward_dropout, training)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "norm_first": self.norm_first,
                "chunk_size": self.chunk_size,
                "num_key_value_heads": self.num_key_value_heads,
                "sliding_window": self.sliding_window,
                "use_gate": self.use_gate,
                "positions": self.positions,
                "rotary_max_wavelength": self.rotary_max_wavelength,
                "rotary_scaling_factor": self.rotary_scaling_factor,
                "normalization": self.normalization,
                "feed_forward": self.feed_forward,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
