"""One class per task: what differs between translating, classifying and
completing text lives here, once, and nowhere else compares task names.

    from keras_attention.tasks import ExportSettings, task_of
    task = task_of(model)            # from the model's `task` attribute
    task.sides                       # its tokenizers: ("source", "target") or ("text",)
    answer = task.explore(explorer, ids)  # the explorer's answer

Each model of the zoo names its task (`Transformer.task == "translation"`).
The export, the explorer, the convert command and the CTranslate2 export
ask the task; a new task is one new class here, its builder, and its
server in `keras_attention/export/servers/`. This package imports nothing
from `export/` (tasks sit below it).
"""

from keras_attention.tasks.base import ExportSettings, Task
from keras_attention.tasks.classification import Classification
from keras_attention.tasks.embedding import Embedding
from keras_attention.tasks.language_model import LanguageModeling
from keras_attention.tasks.translation import Translation

__all__ = [
    "TASKS",
    "Classification",
    "Embedding",
    "ExportSettings",
    "LanguageModeling",
    "Task",
    "Translation",
    "task_of",
]

TASKS = {
    task.name: task for task in (Translation(), Classification(), LanguageModeling(), Embedding())
}


def task_of(model):
    """The `Task` of a zoo model (or of a task's name)."""
    name = model if isinstance(model, str) else getattr(model, "task", None)
    if name not in TASKS:
        raise ValueError(
            "`model` must be a keras_attention Transformer, Seq2SeqAttention, "
            "TransformerClassifier, TransformerEmbedder or TransformerLM. "
            f"Received: {type(model).__name__}" + (f" {model!r}" if isinstance(model, str) else "")
        )
    return TASKS[name]
