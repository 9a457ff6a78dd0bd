"""`SentencePieceOps`: TF Text's SentencePiece ops over a serialized model,
for `SubwordTokenizer` and `MappedSubwordTokenizer`."""

import hashlib

import tensorflow as tf


def _named_model_resource(model):
    """TF Text's SentencePiece model resource, named after the model's hash."""
    from tensorflow_text.python.ops import sentencepiece_tokenizer as ops

    class NamedModelResource(ops._SentencepieceModelResource):
        def _create_resource(self):
            return ops.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model,
                shared_name="sentencepiece_" + hashlib.sha256(self._model).hexdigest()[:24],
            )

    return NamedModelResource(model, name=None)


class SentencePieceOps(tf.Module):
    """TF Text's SentencePiece tokenizer over a serialized `model`, giving
    `out_type` (tf.int32 ids or tf.string pieces) from `tokenize`."""

    def __init__(self, model, out_type, name=None):
        super().__init__(name=name)
        self.model, self.out_type = model, out_type
        self._tokenizer = self._make_tokenizer()

    def _make_tokenizer(self):
        import tensorflow_text

        tokenizer = tensorflow_text.SentencepieceTokenizer(model=self.model, out_type=self.out_type)
        # TF Text's SentencePiece resource has no name of its own: in a
        # reloaded SavedModel with two of them (a translation model's source
        # and target vocabularies), both ops used one model, the last made
        # (seen with tensorflow-text 2.20). Named by a hash of the model,
        # each resource is its own, and equal models may share one.
        tokenizer._model_resource = _named_model_resource(self.model)
        return tokenizer

    def __call__(self, method, argument):
        """`self._tokenizer.method(argument)`. `tf.random.set_seed` (which
        `keras.utils.set_random_seed` calls) clears TensorFlow's eager caches
        and with them the SentencePiece resource made when this tokeniser
        was: eagerly, it is made again once."""
        try:
            return getattr(self._tokenizer, method)(argument)
        except tf.errors.NotFoundError:
            if not tf.executing_eagerly():
                raise
            self._tokenizer = self._make_tokenizer()
            return getattr(self._tokenizer, method)(argument)
