"""Each task's server: the `tf.Module` whose signatures an export serves,
one module per task with every signature of that task (the older ones and
CTranslate2's) and how it frames text into ids and back.

    server = make_server(model, tokenizer, target_tokenizer, settings)
    tf.saved_model.save(server, path, signatures=server.signatures())

A new task adds its module here and its line in `SERVERS`; what every
server shares (the `Server` base, option checks, row grouping) is in
`base.py`.
"""

from keras_attention.export.servers.base import MAX_BEAM_SIZE, Server
from keras_attention.export.servers.classification import ClassificationServer
from keras_attention.export.servers.embedding import EmbeddingServer
from keras_attention.export.servers.language_model import LanguageModelServer
from keras_attention.export.servers.translation import TranslationServer
from keras_attention.tasks import (
    Classification,
    Embedding,
    LanguageModeling,
    Translation,
    task_of,
)

__all__ = [
    "MAX_BEAM_SIZE",
    "SERVERS",
    "ClassificationServer",
    "EmbeddingServer",
    "LanguageModelServer",
    "Server",
    "TranslationServer",
    "make_server",
]

# A task's name -> its server.
SERVERS = {
    Translation.name: TranslationServer,
    Classification.name: ClassificationServer,
    LanguageModeling.name: LanguageModelServer,
    Embedding.name: EmbeddingServer,
}


def make_server(model, tokenizer, target_tokenizer, settings):
    """The server for the model's task (`keras_attention.tasks`), given its
    tokenizers (the target's for a translator, else None) and the export's
    `ExportSettings`."""
    task = task_of(model)
    if "target" in task.sides and target_tokenizer is None:
        raise ValueError("A translation model needs `target_tokenizer`. Received: None")
    tokenizers = dict(
        zip(task.sides, (tokenizer, target_tokenizer)[: len(task.sides)], strict=True)
    )
    return SERVERS[task.name](model, tokenizers, settings)
