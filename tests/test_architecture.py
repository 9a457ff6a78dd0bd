"""The house's floors: every module sits on a floor, imports only from its
own floor or the ones below, and no modules import each other in a cycle
(docs/architecture.md draws the floors).

Imports are read from the source (`ast`), everywhere in a file, those
inside functions included: an import deferred into a function is still an
arrow between two modules.
"""

import ast
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

# Folder of the repository -> the name its modules import under
# (`models/` and `recipes/` install as keras_attention.models and .recipes).
PACKAGES = {
    "keras_attention": "keras_attention",
    "models": "keras_attention.models",
    "recipes": "keras_attention.recipes",
    "benchmarks": "benchmarks",
}

# Lowest first: a module may import from its own floor and those below.
FLOORS = [
    # what every part may use
    [
        "keras_attention._version",
        "keras_attention.renamed",
        "keras_attention.saving",
        "keras_attention.utils",
        "keras_attention.compat",
        "keras_attention.files",
        "keras_attention.run_files",
    ],
    ["keras_attention.layers", "keras_attention.data"],
    ["keras_attention.models", "keras_attention.objectives", "keras_attention.visualize"],
    ["keras_attention.decoding"],
    ["keras_attention.tasks"],
    ["keras_attention.export"],
    [
        "keras_attention.translator",
        "keras_attention.generator",
        "keras_attention.encoder",
        "keras_attention.translate",
        "keras_attention.embed",
        "keras_attention.convert",
        "keras_attention.explore",
        # The package itself, which offers Translator, Generator and Encoder.
        "keras_attention",
    ],
    ["keras_attention.recipes", "keras_attention.__main__"],
    ["benchmarks"],
]


def module_files(root):
    """Module name -> its file, for every module of `PACKAGES` under `root`."""
    modules = {}
    for folder, name in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([name, *parts])] = path
    return modules


def import_graph(root):
    """Module -> the set of the project's modules it imports. `from a import
    b` points at the module `a.b` where there is one, else at `a`; a
    package's own `__init__` is no arrow for the modules below it."""
    modules = module_files(root)

    def known(name):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = []
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets += [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
        graph[module] = {
            target
            for target in map(known, targets)
            if target and target != module and not module.startswith(target + ".")
        }
    return graph


def floor_of(module):
    """The floor of `module`: that of the longest name in `FLOORS` it is or
    is below; None where it has none."""
    best = None
    for number, names in enumerate(FLOORS):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > len(best[1]):
                    best = (number, name)
    return best and best[0]


def upward_imports(graph):
    """`(module, imported)` pairs where `imported` is on a higher floor."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if floor_of(target) > floor_of(module)
    )


def cycles(graph):
    """The sets of modules that import each other, each sorted (Tarjan's
    strongly connected components with more than one module)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_every_module_has_a_floor():
    assert [module for module in import_graph(REPOSITORY) if floor_of(module) is None] == []


def test_no_import_goes_up_a_floor():
    assert upward_imports(import_graph(REPOSITORY)) == []


def test_no_import_cycle():
    assert cycles(import_graph(REPOSITORY)) == []


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path):
    """A small house with one arrow up (a layer importing the export) and
    two data modules that import each other, one of them inside a function."""
    files = {
        "keras_attention/__init__.py": "",
        "keras_attention/layers/__init__.py": "",
        "keras_attention/layers/attention.py": "from keras_attention.export import save\n",
        "keras_attention/export/__init__.py": "",
        "keras_attention/export/save.py": "from keras_attention.layers import attention\n",
        "keras_attention/data/__init__.py": "",
        "keras_attention/data/a.py": "def f():\n    from keras_attention.data import b\n",
        "keras_attention/data/b.py": "from . import a\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert upward_imports(graph) == [
        ("keras_attention.layers.attention", "keras_attention.export.save")
    ]
    assert cycles(graph) == [
        ["keras_attention.data.a", "keras_attention.data.b"],
        ["keras_attention.export.save", "keras_attention.layers.attention"],
    ]
