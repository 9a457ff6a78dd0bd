"""`Encoder`: sentence-transformers' `encode` over an embedder's export.

A sentence-transformers user switches by changing the class:

    from keras_attention import Encoder

    encoder = Encoder("runs/all-MiniLM-L6-v2")
    vectors = encoder.encode(["How old are you?", "What is your age?"])
    encoder.similarity(vectors, vectors)  # [2, 2] cosine similarities

The SavedModel tokenizes, pools and normalizes in its graph (its `embed`
and `embed_with_prompt` signatures), so what runs here is what TF Serving
runs.
"""

import sys

import numpy as np

from keras_attention.translator import ExportClient, _texts


class Encoder(ExportClient):
    """An embedder's export, called as sentence-transformers'
    `SentenceTransformer` is.

    Args:
        model_path: an export version folder, a TF Serving model folder (its
            highest version) or a run folder (the highest version of its
            export).
        device, inter_threads, intra_threads: as `Translator`'s.
    """

    SIGNATURE = "embed"
    KIND = "an embedder's"

    def __init__(self, model_path, device="cpu", inter_threads=0, intra_threads=0):
        super().__init__(model_path, device, inter_threads, intra_threads)
        about = self.metadata()
        self.prompts = dict(about.get("prompts") or {})
        self.default_prompt_name = about.get("default_prompt_name")
        self._with_prompt = self._loaded.signatures.get("embed_with_prompt")

    def encode(
        self,
        sentences,
        prompt_name=None,
        prompt=None,
        batch_size=32,
        show_progress_bar=False,
        normalize_embeddings=False,
    ):
        """The vectors of `sentences`, float32 numpy `[N, D]` (`[D]` for one
        text given as a str), as `SentenceTransformer.encode` gives them.

        Args:
            sentences: a text or a list of texts.
            prompt_name: one of the export's `prompts` (such as "query"), put
                before every text; None: the export's default prompt (if it
                has one).
            prompt: a text put before every text, instead of any named one
                ("" for none).
            batch_size: int, texts per call of the export (texts of similar
                length are batched together; the answer keeps their order).
            show_progress_bar: bool, a progress line on stderr.
            normalize_embeddings: bool, scale each vector to unit length (a
                dot product is then the cosine).
        """
        one = isinstance(sentences, str)
        texts = _texts("sentences", [sentences] if one else sentences)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive integer. Received: {batch_size!r}")
        call = self._chooser(prompt_name, prompt)
        if prompt is not None:
            texts = [prompt + text for text in texts]
        order = np.argsort([-len(text) for text in texts], kind="stable")
        vectors = [None] * len(texts)
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            answer = call([texts[row] for row in rows])
            for row, vector in zip(rows, answer, strict=True):
                vectors[row] = vector
            if show_progress_bar:
                done = min(start + batch_size, len(texts))
                print(f"\rembedded {done}/{len(texts)} texts", end="", file=sys.stderr)
        if show_progress_bar:
            print(file=sys.stderr)
        width = self._signature.structured_outputs["embeddings"].shape[-1]
        result = np.stack(vectors) if vectors else np.zeros((0, width), "float32")
        if normalize_embeddings:
            result = result / np.maximum(np.linalg.norm(result, axis=1, keepdims=True), 1e-12)
        return result[0] if one else result

    def _chooser(self, prompt_name, prompt):
        """The function of a batch of texts that the prompt options ask for."""
        tf = self._tf
        if prompt_name is not None and prompt_name not in self.prompts:
            raise ValueError(
                f"`prompt_name` must be one of the export's prompts {sorted(self.prompts)}. "
                f"Received: prompt_name={prompt_name!r}"
            )
        if prompt is not None and not isinstance(prompt, str):
            raise TypeError(f"`prompt` must be a str. Received: {prompt!r}")
        name = prompt_name
        if prompt is not None:
            name = ""  # the caller's prompt, put first above; no named one
        elif prompt_name is None:
            name = None  # `embed`: the export's default prompt

        def call(batch):
            text = tf.constant(batch, tf.string)
            if name is None or (name == "" and not self.prompts):
                answer = self._signature(text=text)
            else:
                answer = self._with_prompt(text=text, prompt_name=tf.fill(tf.shape(text), name))
            return answer["embeddings"].numpy()

        return call

    def metadata(self):
        import json

        path = self.model_path / "assets.extra" / "keras_attention.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    @staticmethod
    def similarity(a, b):
        """Cosine similarities of the vectors `a` `[N, D]` (or `[D]`) and
        `b` `[M, D]`, `[N, M]`, as `SentenceTransformer.similarity`."""
        a, b = np.atleast_2d(np.asarray(a, "float32")), np.atleast_2d(np.asarray(b, "float32"))
        if a.shape[-1] != b.shape[-1]:
            raise ValueError(
                f"`a` and `b` must have vectors of one width. Received: {a.shape} and {b.shape}"
            )
        a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
        b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
        return a @ b.T
