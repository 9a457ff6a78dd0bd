"""Converted Hugging Face checkpoints against the engines a user would otherwise
run them on, every engine on one thread: ratios of speed, and whether the
outputs agree.

    python -m benchmarks pretrained                  # both parts (about 40 minutes here)
    python -m benchmarks pretrained --parts marian   # one part
    python -m benchmarks pretrained --smoke --hf-python ""   # the tiny test fixtures, no torch

1. **Llama** of 125M parameters (hidden 768, 12 layers, 12 heads, 4
   key/value heads, SwiGLU 2048, untied `lm_head`, a 32,000-piece
   SentencePiece BPE `tokenizer.model`), greedy, batch 1, a prompt of ten
   tokens, 256 and 2,048 new tokens. Ours: the run that `python -m
   keras_attention.convert` writes, exported by `python -m
   keras_attention.export RUN --export-jit-compile` once for each length
   (XLA compiles the search of the export's own `max_decoding_length`), through its
   `complete_with_options` signature, text in and text out. Peers:
   transformers' `generate`; KerasHub's `LlamaCausalLM.from_preset` on the
   same folder, `generate` after `compile(sampler="greedy",
   jit_compile=True)`, token ids in and out.
2. **Marian** at OPUS-MT's size (d_model 512, 6 + 6 layers, 8 heads, FFN
   2048, swish, tied embeddings, SentencePiece unigram source and target
   models), beam 4, batches of 32 English sentences, text in and text out.
   Ours: `python -m keras_attention.export RUN --export-jit-compile`, its
   `translate_with_options` signature. Peers: transformers' `generate`;
   CTranslate2 float32 on the same weights (`python -m
   keras_attention.export RUN --format ctranslate2`).

Nothing is downloaded. The checkpoints are random weights drawn by
transformers' own classes (`LlamaForCausalLM(config)`, `MarianMTModel(config)`,
`save_pretrained`) in the Python that has torch (`--hf-python`), with
SentencePiece models trained here on the gettext catalogues' English
messages and French translations (`/usr/share/locale/fr/LC_MESSAGES/*.mo`)
and the installed packages' documentation. That Python also runs the
transformers contender, a worker process driven call by call over a pipe.
`--smoke` takes the committed tiny fixtures (`tests/convert/fixtures`)
instead; without `--hf-python` it skips transformers with a printed line.

A random model stops anywhere, so no contender may stop early: the Llama's
end-of-sequence row of `lm_head` is zero (a logit of 0, below the largest
of 32,000 random logits at every step), Marian's `final_logits_bias` at
`</s>` is -100. Every contender then generates exactly N tokens (checked),
and every translation runs to the limit, 24 pieces, where every length
penalty ranks the beams alike.

Every engine runs on one thread (TensorFlow's intra- and inter-op pools,
torch's, CTranslate2's). Each contender is called once to warm up (for
Llama a short call of the same graph or compiled shapes), then `--repeats`
times in turns (A B C A B C, `measure.race`), the first round's outputs
compared; ratios are the peer's median time over ours: above 1, ours is
faster.
"""

import contextlib
import gettext
import hashlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from functools import partial
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
FIXTURES = REPOSITORY / "tests" / "convert" / "fixtures"
LLAMA = dict(
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=4,
    intermediate_size=2048,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
)
MARIAN = dict(
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    max_position_embeddings=512,
    scale_embedding=True,
)
VOCABULARY = 32000  # Llama's; each of Marian's SentencePiece models takes half
NEW_TOKENS, SMOKE_NEW_TOKENS = (256, 2048), (16,)
PROMPT = "The library is on the second floor."
SMOKE_PROMPT = "Marie"  # the fixture goes on past 24 tokens (its reference.json)
BEAM_SIZE = 4
BATCH_SIZE, SMOKE_BATCH_SIZE = 32, 4
SENTENCES = 96  # 3 batches
MARIAN_MAX_LENGTH = 26  # Hugging Face's: the start token, 24 pieces, the forced </s>
END = 2  # Llama's end-of-sequence id

# --- Text and tokenisers ---------------------------------------------------------


def catalogue_pairs():
    """(English, French) messages of the French gettext catalogues."""
    pairs = set()
    for path in sorted(Path("/usr/share/locale/fr/LC_MESSAGES").glob("*.mo")):
        try:
            with open(path, "rb") as file:
                catalogue = gettext.GNUTranslations(file)._catalog
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        pairs |= {(e, f) for e, f in catalogue.items() if isinstance(e, str) and e and f}
    return sorted(pairs)


def documentation_lines():
    """The lines of the installed Python packages' documentation files."""
    lines = []
    for path in sorted(Path(sysconfig.get_paths()["purelib"]).rglob("*")):
        if path.suffix in (".md", ".rst", ".txt") and path.is_file():
            try:
                lines += path.read_text("utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                pass
    return lines


def train_sentencepiece(path, lines, size, **options):
    """Writes a SentencePiece model of `size` pieces to `path`, or of the most
    the text allows (SentencePiece names that number); returns its size."""
    import sentencepiece

    model, lines = io.BytesIO(), [line.strip() for line in lines if line.strip()]
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=model,
            vocab_size=size,
            num_threads=1,
            minloglevel=2,
            **options,
        )
    except RuntimeError as error:
        most = re.search(r"Please set it to a value <= (\d+)", str(error))
        if not most:
            raise
        return train_sentencepiece(path, lines, int(most.group(1)), **options)
    Path(path).write_bytes(model.getvalue())
    return size


# Llama 2's SentencePiece settings: BPE, bytes for what has no piece, digits split.
LLAMA_SPM = dict(
    model_type="bpe",
    byte_fallback=True,
    split_digits=True,
    remove_extra_whitespaces=False,
    allow_whitespace_only_pieces=True,
    normalization_rule_name="identity",
    character_coverage=0.99995,
)
MARIAN_SPM = dict(model_type="unigram", normalization_rule_name="nmt_nfkc")  # OPUS-MT's


def marian_vocabulary(*models):
    """OPUS-MT's `vocab.json` order: `</s>`, `<unk>`, both models' pieces, `<pad>`."""
    import sentencepiece

    tokens = ["</s>", "<unk>"]
    for model in models:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
        for i in range(processor.get_piece_size()):
            if not (processor.is_control(i) or processor.is_unknown(i)):
                tokens.append(processor.id_to_piece(i))
    return {token: i for i, token in enumerate([*dict.fromkeys(tokens), "<pad>"])}


def pick_sources(english, source_model, count):
    """`count` plain one-line English messages of 15 to 25 source pieces, in
    an order fixed by their hash."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(source_model))
    chosen = []
    for text in sorted(set(english), key=lambda t: hashlib.md5(t.encode()).hexdigest()):
        if re.fullmatch(r"[A-Z][\w ,.'()-]+", text) and 15 <= len(processor.encode(text)) <= 25:
            chosen.append(text)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"only {len(chosen)} English messages of 15 to 25 pieces")


def join(pieces):
    """Pieces as text, as our Marian detokeniser writes them: joined, "▁" a
    space, the ends stripped. (transformers decodes through the source
    model, which writes the target-only pieces a random model picks as "⁇".)"""
    return "".join(pieces).replace("\u2581", " ").strip()


# --- The torch side: runs under --hf-python, which has no TensorFlow -------------


def start_torch_worker():
    """Sets up the worker process (torch on one thread, anything printed sent
    to stderr) and returns `(torch, transformers, serve)`: `serve(operations)`
    answers each JSON request line on stdin, `{"op", "arguments"}`, with a
    JSON line on stdout, `{"result"}` or `{"error"}`."""
    import torch
    import transformers

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    transformers.logging.set_verbosity_error()
    answers, sys.stdout = sys.stdout, sys.stderr

    def serve(operations):
        operations = {f.__name__: f for f in operations}
        operations["versions"] = lambda: {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        }
        for line in sys.stdin:
            request = json.loads(line)
            try:
                answer = {"result": operations[request["op"]](**request["arguments"])}
            except Exception as error:  # noqa: BLE001  (the driver raises it)
                answer = {"error": f"{type(error).__name__}: {error}"}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()

    return torch, transformers, serve


def torch_worker():
    """The Llama and Marian side of the worker process."""
    torch, transformers, serve = start_torch_worker()
    models = {}

    def make_llama(folder, new_tokens):
        from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, LlamaTokenizer

        tokenizer = LlamaTokenizer(
            **LlamaTokenizer.convert_to_native_format(
                vocab_file=f"{folder}/tokenizer.model", add_bos_token=True, add_eos_token=False
            )
        )
        tokenizer.save_pretrained(folder)
        # transformers 5 leaves these out; Llama 2's checkpoints have them.
        file = Path(folder) / "tokenizer_config.json"
        written = json.loads(file.read_text()) | {"add_bos_token": True, "add_eos_token": False}
        file.write_text(json.dumps(written, indent=1))
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=1, eos_token_id=END, **LLAMA)
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            model.lm_head.weight[END] = 0  # a logit of 0: never the largest
        model.generation_config = GenerationConfig(
            bos_token_id=1, eos_token_id=END, max_new_tokens=new_tokens
        )
        model.save_pretrained(folder)
        return sum(p.numel() for p in model.parameters())

    def make_marian(folder):
        from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

        files = [f"{folder}/{name}" for name in ("source.spm", "target.spm", "vocab.json")]
        tokenizer = MarianTokenizer(*files, source_lang="en", target_lang="fr")
        tokenizer.save_pretrained(folder)
        pad = len(tokenizer) - 1
        ids = dict(pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad)
        torch.manual_seed(0)
        model = MarianMTModel(
            MarianConfig(
                vocab_size=pad + 1,
                activation_function="swish",
                share_encoder_decoder_embeddings=True,
                tie_word_embeddings=True,
                forced_eos_token_id=0,
                **ids,
                **MARIAN,
            )
        )
        with torch.no_grad():
            model.final_logits_bias[0, 0] = -100.0  # </s>: never among the best
        model.generation_config = GenerationConfig(
            num_beams=BEAM_SIZE,
            max_length=MARIAN_MAX_LENGTH,
            bad_words_ids=[[pad]],
            forced_eos_token_id=0,
            **ids,
        )
        model.save_pretrained(folder)
        return sum(p.numel() for p in model.parameters())

    def load(kind, folder):
        if kind == "llama":
            models[kind] = transformers.LlamaForCausalLM.from_pretrained(folder).eval(), None
        else:
            model = transformers.MarianMTModel.from_pretrained(folder).eval()
            models[kind] = model, transformers.MarianTokenizer.from_pretrained(folder)
        return models[kind][0].config._attn_implementation

    @torch.inference_mode()
    def generate(ids, new_tokens):
        ids = torch.tensor([ids])
        output = models["llama"][0].generate(ids, do_sample=False, max_new_tokens=new_tokens)
        return output[0, ids.shape[1] :].tolist()

    @torch.inference_mode()
    def translate(batches):
        model, tokenizer = models["marian"]
        texts = []
        for batch in batches:
            inputs = tokenizer(batch, return_tensors="pt", padding=True)
            output = model.generate(**inputs, num_beams=BEAM_SIZE).tolist()
            texts += [join(tokenizer.convert_ids_to_tokens(row, True)) for row in output]
        return texts

    serve((make_llama, make_marian, load, generate, translate))


class TorchWorker:
    """The worker process, driven call by call: `worker("generate", ...)`."""

    module = "benchmarks.pretrained"  # whose `--torch-worker` answers

    def __init__(self, python):
        environment = {"PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(
            [python, "-m", self.module, "--torch-worker"],
            cwd=REPOSITORY,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **environment, "TOKENIZERS_PARALLELISM": "false"},
        )

    def __call__(self, op, **arguments):
        self.process.stdin.write(json.dumps({"op": op, "arguments": arguments}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the torch worker ended (exit status {self.process.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the torch worker failed on {op}: {answer['error']}")
        return answer["result"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


# --- Checkpoints -----------------------------------------------------------------


def make_llama(folder, worker):
    """A Llama checkpoint folder; returns what it is."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [text for pair in catalogue_pairs() for text in pair] + documentation_lines()
    size = train_sentencepiece(folder / "tokenizer.model", lines, VOCABULARY, **LLAMA_SPM)
    parameters = worker("make_llama", folder=str(folder), new_tokens=max(NEW_TOKENS))
    return {"vocabulary": size, "parameters": parameters}


def make_marian(folder, worker):
    """A Marian checkpoint folder; returns what it is, and the sources to translate."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs, half = catalogue_pairs(), VOCABULARY // 2
    english = [e for e, _ in pairs]
    source, target = folder / "source.spm", folder / "target.spm"
    sizes = [
        train_sentencepiece(source, english + documentation_lines(), half, **MARIAN_SPM),
        train_sentencepiece(target, [f for _, f in pairs], half, **MARIAN_SPM),
    ]
    vocabulary = marian_vocabulary(source, target)
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
    parameters = worker("make_marian", folder=str(folder))
    made = {"spm_pieces": sizes, "vocabulary": len(vocabulary), "parameters": parameters}
    return made, pick_sources(english, source, SENTENCES)


# --- Measuring -------------------------------------------------------------------


def command(module, *arguments):
    """`python -m module ARGUMENTS`, in this process: the module's `main(argv)`."""
    importlib.import_module(f"{module}.__main__").main([str(a) for a in arguments])


def load_export(run, signature, version=1):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's SentencePiece ops)

    (folder,) = run.glob(f"serving/*/{version}")
    return tf.saved_model.load(str(folder)).signatures[signature]


def timed(contenders, repeats, warm_ups=None):
    """`(median seconds, outputs)`: a warm-up call of each contender (or of
    its stand-in in `warm_ups`, a cheaper call of the same graph or the same
    compiled shapes), then `repeats` rounds in turns; the outputs are the
    first round's."""
    from benchmarks import measure

    for name, function in {**contenders, **(warm_ups or {})}.items():
        start = time.perf_counter()
        function()
        print(f"  {name}: warm-up call {time.perf_counter() - start:.1f} s", flush=True)
    outputs = {}
    kept = {name: partial(keep, outputs, name, f) for name, f in contenders.items()}
    return measure.race(kept, repeats, warmup=0), outputs


def keep(outputs, name, function):
    outputs.setdefault(name, function())


def leading(a, b):
    """How many leading tokens two sequences share."""
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def until_end(ids):
    ids = list(ids)
    return ids[: ids.index(END)] if END in ids else ids


def llama_part(smoke, repeats, worker, work):
    import keras_hub
    import numpy as np
    import sentencepiece
    import tensorflow as tf

    checkpoint = FIXTURES / "llama" if smoke else work / "llama"
    result = {} if smoke else {"checkpoint": make_llama(checkpoint, worker)}
    run = work / "llama_run"
    command(
        "keras_attention.convert", checkpoint, "--output-dir", run, "--overwrite", "--no-export"
    )
    spm = sentencepiece.SentencePieceProcessor(model_file=str(checkpoint / "tokenizer.model"))
    text = SMOKE_PROMPT if smoke else PROMPT
    prompt = [spm.bos_id()] + spm.encode(text)
    result |= {"prompt": text, "prompt_tokens": len(prompt)}

    hub = keras_hub.models.LlamaCausalLM.from_preset(str(checkpoint))
    hub = type(hub)(backbone=hub.backbone, preprocessor=None)  # token ids in and out
    hub.compile(sampler="greedy", jit_compile=True)
    result["keras_hub"] = f"{type(hub).__name__}, jit_compile={hub.jit_compile}"
    if worker:
        result["transformers_attention"] = worker("load", kind="llama", folder=str(checkpoint))

    def export(new_tokens):
        """Our export's `complete_with_options` for `new_tokens`: XLA runs the
        search of the export's own length, so each length has its export
        (its `--max-decoding-length`, as `generation_config.json` would
        set it; prompts are cut to as many)."""
        lengths = ["--max-input-length", new_tokens, "--max-decoding-length", new_tokens]
        command(
            "keras_attention.export",
            run,
            "--export-jit-compile",
            *lengths,
            "--export-version",
            new_tokens,
        )
        served = load_export(run, "complete_with_options", new_tokens)
        options = {"beam_size": tf.constant([1]), "max_decoding_length": tf.constant([new_tokens])}
        return lambda: (
            served(prompt=tf.constant([text]), **options)["completion"].numpy()[0].decode()
        )

    def keras_hub(new_tokens, warm_up=False):
        """Its new token ids. A warm-up call takes the whole width as the
        prompt: it compiles the same function and generates nothing."""
        ids = np.array([prompt + [0] * new_tokens], "int32")
        prompt_length = ids.size if warm_up else len(prompt)
        inputs = {"token_ids": ids, "padding_mask": np.arange(ids.size)[None] < prompt_length}
        return until_end(hub.generate(inputs, stop_token_ids=None)["token_ids"][0, len(prompt) :])

    def transformers(new_tokens):
        return until_end(worker("generate", ids=prompt, new_tokens=new_tokens))

    rows = []
    for new_tokens in SMOKE_NEW_TOKENS if smoke else NEW_TOKENS:
        print(f"\nLlama, {new_tokens} new tokens", flush=True)
        contenders = {"ours_export_xla": export(new_tokens)}  # its warm-up call compiles
        contenders["keras_hub"] = partial(keras_hub, new_tokens)
        warm_ups = {"keras_hub": partial(keras_hub, new_tokens, warm_up=True)}
        if worker:
            contenders["transformers"] = partial(transformers, new_tokens)
            warm_ups["transformers"] = partial(transformers, 1)
        seconds, outputs = timed(contenders, repeats, warm_ups)
        reference = "transformers" if worker else "keras_hub"
        row = {"new_tokens": new_tokens, "reference": reference}
        row["export_text_equal"] = outputs["ours_export_xla"] == spm.decode(outputs[reference])
        for name, output in outputs.items():
            row[f"{name}_tokens_per_s"] = new_tokens / seconds[name]
            if name != "ours_export_xla":  # text out; the others' token ids
                row[f"{name}_tokens"] = len(output)
                row[f"{name}_leading_equal"] = leading(output, outputs[reference])
        for peer in ("transformers", "keras_hub"):
            if peer in seconds:
                row[f"ours_export_xla_over_{peer}"] = seconds[peer] / seconds["ours_export_xla"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return result | {"rows": rows}


def marian_part(smoke, repeats, worker, work):
    import ctranslate2
    import sentencepiece
    import tensorflow as tf

    checkpoint = FIXTURES / "marian" if smoke else work / "marian"
    if smoke:  # the fixture's first test texts without a language code
        texts = json.loads((checkpoint / "reference.json").read_text())["texts"]
        result, sources = {}, [text for text in texts if ">>" not in text][:8]
    else:
        made, sources = make_marian(checkpoint, worker)
        result = {"checkpoint": made}
    size = SMOKE_BATCH_SIZE if smoke else BATCH_SIZE
    batches = [sources[i : i + size] for i in range(0, len(sources), size)]
    run = work / "marian_run"
    command(
        "keras_attention.convert", checkpoint, "--output-dir", run, "--no-export", "--overwrite"
    )
    command("keras_attention.export", run, "--export-jit-compile")
    command("keras_attention.export", run, "--format", "ctranslate2", "--export-dir", run / "ct2")
    served = load_export(run, "translate_with_options")
    config = json.loads((run / "config.json").read_text())
    beam_size, max_length = config["beam_size"], config["max_decoding_length"]  # XLA's
    translator = ctranslate2.Translator(str(run / "ct2"), intra_threads=1, inter_threads=1)
    spm = sentencepiece.SentencePieceProcessor(model_file=str(checkpoint / "source.spm"))
    result |= {"sources": sources, "beam_size": beam_size, "max_length": max_length}

    def ours():
        texts = []
        for batch in batches:
            n = len(batch)
            options = {"beam_size": [beam_size] * n, "max_decoding_length": [max_length] * n}
            options = {name: tf.constant(values) for name, values in options.items()}
            answer = served(text=tf.constant(batch), **options)
            texts += [text.decode() for text in answer["translation"].numpy()]
        return texts

    def ct2():
        texts = []
        for batch in batches:
            tokens = [spm.encode(text, out_type=str) + ["</s>"] for text in batch]
            answers = translator.translate_batch(
                tokens, beam_size=beam_size, max_decoding_length=max_length
            )
            texts += [join(answer.hypotheses[0]) for answer in answers]
        return texts

    contenders = {"ours_export_xla": ours, "ctranslate2": ct2}
    if worker:
        result["transformers_attention"] = worker("load", kind="marian", folder=str(checkpoint))
        contenders["transformers"] = lambda: worker("translate", batches=batches)
    print(f"\nMarian, beam {beam_size}, {len(sources)} sentences in batches of {size}", flush=True)
    seconds, outputs = timed(contenders, repeats)
    reference = "transformers" if worker else "ctranslate2"
    row = {"batch_size": size, "beam_size": beam_size, "reference": reference}
    for name, texts in outputs.items():
        row[f"{name}_sentences_per_s"] = len(sources) / seconds[name]
        triples = zip(sources, texts, outputs[reference], strict=True)
        differing = [triple for triple in triples if triple[1] != triple[2]]
        row[f"{name}_same_as_reference"] = len(sources) - len(differing)
        result[f"{name}_differing"] = differing  # [source, this, the reference]
    for peer in ("transformers", "ctranslate2"):
        if peer in seconds:
            row[f"ours_export_xla_over_{peer}"] = seconds[peer] / seconds["ours_export_xla"]
    print(json.dumps(row), flush=True)
    return result | {"rows": [row]}


LLAMA_COLUMNS = [
    ("new_tokens", "new tokens", "d"),
    ("ours_export_xla_over_transformers", "export XLA / transformers", ".2f"),
    ("ours_export_xla_over_keras_hub", "export XLA / KerasHub", ".2f"),
]
MARIAN_COLUMNS = [
    ("batch_size", "batch", "d"),
    ("ours_export_xla_over_transformers", "export XLA / transformers", ".2f"),
    ("ours_export_xla_over_ctranslate2", "export XLA / CTranslate2", ".2f"),
]
PARTS = {"llama": llama_part, "marian": marian_part}
REPEATS = 3
ONE_THREAD = True
TABLES = [
    (f"{part}: the peer's time over ours (above 1, ours is faster)", (part, "rows"), columns)
    for part, columns in (("llama", LLAMA_COLUMNS), ("marian", MARIAN_COLUMNS))
]


def add_options(parser):
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    add_torch_options(parser, "checkpoints and runs", "pretrained")


def add_torch_options(parser, what, name):
    """`--hf-python` and `--work-dir`, for this benchmark and `bert_classifier`."""
    parser.add_argument(
        "--hf-python",
        default="/work/hfenv/bin/python",
        help="a Python with torch and transformers (default: %(default)s; '' for none)",
    )
    parser.add_argument(
        "--work-dir", help=f"{what} (/tmp/keras_attention_{name}, ..._smoke with --smoke)"
    )


@contextlib.contextmanager
def torch_peer(worker_class, hf_python, smoke):
    """`(worker, what it runs)`: the torch worker under `hf_python`, closed
    afterwards; with `smoke` and no such Python, `(None, why not)`. Prints
    the second."""
    if hf_python and Path(hf_python).is_file():
        worker = worker_class(hf_python)
        try:
            versions = worker("versions")
            print(f"transformers (torch): {versions}", flush=True)
            yield worker, versions
        finally:
            worker.close()
    elif smoke:
        why_not = f"skipped: no Python with torch (--hf-python {hf_python!r})"
        print(f"transformers (torch): {why_not}", flush=True)
        yield None, why_not
    else:
        raise SystemExit(
            f"error: --hf-python {hf_python!r}: making the checkpoints needs a Python with torch"
        )


def work_folder(work_dir, name, smoke):
    return Path(work_dir or f"/tmp/keras_attention_{name}{'_smoke' if smoke else ''}")


def run_beside_torch(worker_class, name, parts, smoke, repeats, hf_python, work_dir):
    """Runs each of `parts` ({part: race(smoke, repeats, worker, work)})
    beside a `worker_class` worker (`torch_peer`), in the work folder
    `name`; returns what each part found, the torch versions and the
    seconds it all took."""
    results = {}
    start = time.perf_counter()
    with torch_peer(worker_class, hf_python, smoke) as (worker, versions):
        results["transformers"] = versions
        work = work_folder(work_dir, name, smoke)
        for part, race in parts.items():
            results[part] = race(smoke, repeats, worker, work)
    results["seconds"] = time.perf_counter() - start
    return results


def run(smoke, repeats, parts, hf_python, work_dir):
    parts = {part: PARTS[part] for part in parts}
    return run_beside_torch(TorchWorker, "pretrained", parts, smoke, repeats, hf_python, work_dir)


if __name__ == "__main__":
    if sys.argv[1:] == ["--torch-worker"]:
        torch_worker()
    else:
        from benchmarks import section

        section.main("pretrained")
