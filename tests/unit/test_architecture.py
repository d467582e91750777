"""The house's rules, checked on the source text (ast and tokenize; nothing of the project is imported).

- **Floors** (``FLOORS``): which unit may import which. A unit is a folder of ``twisted_broker/``
  (``codec``), a top-level module of it (``config.py``), or ``webui`` / ``bench``. Each import of
  the project's own modules, at module level or inside a function, or under ``TYPE_CHECKING``,
  goes to its own unit or to one the table lists; the table lists only lower floors, or units
  sideways on the same floor.
- **No import circles** between modules (the graph of those imports has no cycle). An import
  of ``a.b.c`` is an edge to ``a.b.c`` alone: the packages' ``__init__`` that Python runs first
  are not counted, since a submodule importing through its own package is no circle.
- **No module over 400 lines** in ``twisted_broker/``, ``webui/`` and ``bench/``. ``tests/`` is
  not held to it: the issue's bar is the source and the benchmarks, and a test module that lists
  golden bytes case by case reads better whole.
- **No two meanings for one name**: no two top-level classes (type aliases included) or
  public module-level constants (a name starting with a capital) of the same name in different
  modules of ``twisted_broker/`` and ``webui/``. Not checked: ``ROLE_NAMES`` (twistd's Options
  and the like, one per module of a family), private ``_NAME`` s (see there), dunders such as
  ``__all__`` (Python's own per-module names) and TypeVars (``T``: a type parameter, not a
  constant). What is the same thing in two places is defined once and imported.
- **Cited files exist**: a path named in a docstring or a comment (``docs/x.md``, ``foo.py``,
  ``dir/foo.py``) is a file of the repository.

Each failure names the file and the offending import or name.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
from collections import defaultdict
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("twisted_broker", "webui", "bench")

# The floors, bottom to top: unit -> (floor, the other units it may import). A unit's own
# modules import each other freely (the cycle check still holds them). docs/architecture.md
# draws the same table.
EVERY_UNIT_BELOW = "every unit on a lower floor"
FLOORS: dict[str, tuple[int, frozenset[str] | str]] = {
    # 1. Leaves: exceptions and 0.7's error codes, the .properties reader, the frozen config
    #    dataclasses, the stdlib-logging bridge, the package (its version), and security's pure
    #    rules (listeners, SCRAM, the SASL state machine, Kafka's ACL model and the authorizer's
    #    decisions), which config.py reads sideways.
    "__init__.py": (1, frozenset()),
    "errors.py": (1, frozenset()),
    "properties.py": (1, frozenset()),
    "config.py": (1, frozenset({"properties.py", "security"})),
    "security": (1, frozenset()),
    "twisted_logging.py": (1, frozenset()),
    # 2. Pure codecs of both protocols (codec/kafka07, codec/kafka): bytes in, values out;
    #    stdlib and compression libraries only.
    "codec": (2, frozenset({"errors.py"})),
    # 3. Files (no Twisted, no timers), and ZooKeeper (paths and values, pure; the kazoo bridge).
    "storage": (3, frozenset({"codec", "errors.py"})),
    "registry": (3, frozenset({"config.py", "errors.py", "security"})),
    # 4. Connections, protocol-blind below one thin class per protocol; they stream the file
    #    regions storage makes without naming storage's type (file_streaming.StreamedRegion).
    #    Followers' connections to leaders live here too (network/kafka07_client.py).
    "network": (4, frozenset({"codec", "errors.py", "security"})),
    # 5. What the handlers call: replication (rules + replica manager, fetcher, controller),
    #    coordinators (groups, producer ids), and server/: the broker's timers and figures.
    #    server/ sits below the handlers because they count into its figures (stats.py) and
    #    nothing in it calls a handler; tap.py starts its services.
    "replication": (5, frozenset({"codec", "storage", "registry", "network", "errors.py"})),
    "coordinator": (5, frozenset({"codec", "storage", "registry", "errors.py"})),
    "server": (5, frozenset({"codec", "storage", "registry", "errors.py"})),
    # 6. One module per API family and protocol; beside them, the clients (on the same codecs
    #    and the 0.7 client connection, never on the broker's side).
    "handlers": (6, frozenset({"codec", "storage", "registry", "replication", "coordinator", "server",
                               "security", "__init__.py", "config.py", "errors.py"})),
    "client": (6, frozenset({"codec", "registry", "network", "config.py", "errors.py"})),
    # 7. Command-line tools (each a subcommand of cli.py) and the local ZooKeeper runner.
    "tools": (7, frozenset({"client", "codec", "registry", "replication", "security", "storage",
                            "config.py", "errors.py"})),
    "local_zookeeper.py": (7, frozenset({"config.py"})),
    # 8. Spark's loader and ETL (which reuse tools' cluster options and tables), the console.
    "spark": (8, frozenset({"client", "codec", "registry", "storage", "tools", "errors.py"})),
    "webui": (8, frozenset({"client", "codec", "registry", "config.py", "errors.py", "security", "twisted_logging.py"})),
    # The listeners of today's clients, built for tap.py (the composition root's second half).
    "kafka_listeners.py": (8, EVERY_UNIT_BELOW),
    # 9. The composition root and the entry points.
    "tap.py": (9, EVERY_UNIT_BELOW),
    "cli.py": (9, frozenset({"client", "registry", "spark", "tools", "__init__.py", "errors.py", "properties.py"})),
    "__main__.py": (9, frozenset({"cli.py"})),
    "devcluster.py": (9, frozenset({"local_zookeeper.py", "config.py", "properties.py"})),
    # 10. The benchmarks drive everything.
    "bench": (10, EVERY_UNIT_BELOW),
}

MAX_LINES = 400

# Names that mean "this module's X" by convention, one per module of a family, always read as
# ``module.NAME``: twistd's Options (one per tap module), a subcommand's one-line HELP (cli.py
# reads tools.<name>.HELP), the schema tables each codec/kafka module adds to protocol.py's.
ROLE_NAMES = {
    "Options": ("twisted_broker/tap.py", "webui/tap.py"),
    "HELP": ("twisted_broker/tools/*.py", "twisted_broker/spark/etl.py"),
    "REQUESTS": ("twisted_broker/codec/kafka/*.py",),
    "RESPONSES": ("twisted_broker/codec/kafka/*.py",),
}
# Private names (_NAME) are not checked: nothing imports them, so no reader meets two of them
# at one place; a ``struct.Struct`` for a module's own layout stays next to the code that reads it.

# Names in comments that look like files but are not files of the repository: what the code
# writes at run time, and a library's own name.
NOT_REPOSITORY_FILES = {
    "zoo.cfg",  # the ZooKeeper configuration local_zookeeper.py writes
    "offsets.json", "_manifest.json",  # what the Spark ETL writes beside its Parquet files
    "stomp.py",  # the STOMP client library bench/peers/activemq.py uses
}
_EXTENSIONS = "py|md|cfg|properties|toml|txt|json|html|css|js|sh|ini|yml|yaml|csv|conf"
_CITED_PATH = re.compile(r"(?<![\w./:-])((?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:" + _EXTENSIONS + r"))(?![\w/])")
_URL = re.compile(r"\w+://\S+")


# -- reading the source --------------------------------------------------------------------

def _source_files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in _source_files(*PACKAGES)}
_TREES: dict[Path, ast.Module] = {}


def _tree(path: Path) -> ast.Module:
    if path not in _TREES:
        _TREES[path] = ast.parse(path.read_text(), str(path))
    return _TREES[path]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _unit(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "twisted_broker":
        return parts[0]
    if len(parts) == 1:
        return "__init__.py"
    if (ROOT / "twisted_broker" / parts[1]).is_dir():
        return parts[1]
    return parts[1] + ".py"


def _known(name: str) -> str | None:
    """The project module that ``import name`` loads last (a package's __init__ or a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[tuple[int, str]]:
    """``(line, imported module)`` for each import of a project module, anywhere in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name``, mod.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            target = _known(name) if name.split(".")[0] in PACKAGES else None
            if target and target != module:
                found.add((node.lineno, target))
    return sorted(found)


@functools.cache
def _graph() -> dict[str, list[tuple[int, str]]]:
    """Every module's project imports; read when a check first needs them, not at collection
    (parsing the whole tree took ~3 s in each pytest worker before any test ran)."""
    return {module: _imports(module) for module in MODULES}


# -- the checks ---------------------------------------------------------------------------------

def test_the_table_only_points_down_or_sideways():
    wrong = []
    for unit, (floor, allowed) in FLOORS.items():
        for other in () if allowed == EVERY_UNIT_BELOW else allowed:
            if other not in FLOORS or FLOORS[other][0] > floor:
                wrong.append(f"{unit} (floor {floor}) may import {other} "
                             f"(floor {FLOORS.get(other, ('unknown',))[0]})")
    assert not wrong, "\n".join(wrong)


def test_every_unit_has_a_floor():
    assert sorted({_unit(m) for m in MODULES} - set(FLOORS)) == []


def _may_import(unit: str, other: str) -> bool:
    if unit == other:
        return True
    floor, allowed = FLOORS[unit]
    if allowed == EVERY_UNIT_BELOW:
        return FLOORS[other][0] < floor
    return other in allowed


def test_imports_go_down_or_sideways_as_the_table_allows():
    wrong = [f"{_rel(MODULES[module])}:{line}: imports {target} ({_unit(module)} may not import {_unit(target)})"
             for module, imports in sorted(_graph().items()) for line, target in imports
             if not _may_import(_unit(module), _unit(target))]
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]  # iterative: no recursion limit to meet
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_cycles_finds_a_circle_and_nothing_else():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    graph = {module: {target for _, target in imports} for module, imports in _graph().items()}
    circles = []
    for component in _cycles(graph):
        members = set(component)
        edges = [f"{_rel(MODULES[m])}:{line}: imports {t}"
                 for m in component for line, t in _graph()[m] if t in members]
        circles.append(" <-> ".join(component) + "\n  " + "\n  ".join(edges))
    assert not circles, "\n".join(circles)


def test_no_module_over_400_lines():
    long = [f"{_rel(p)}: {n} lines" for p in _source_files(*PACKAGES)
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, "\n".join(long)


def _is_type_var(value: ast.expr | None) -> bool:
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in ("TypeVar", "ParamSpec", "TypeVarTuple"))


def _public_names(tree: ast.Module) -> list[tuple[int, str]]:
    """Top-level classes, type aliases (CamelCase assignments) and UPPER_CASE constants."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append((node.lineno, node.name))
            continue
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if _is_type_var(value):
            continue
        for target in targets:
            for name in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(name, ast.Name) and not name.id.startswith("_") and name.id[0].isupper():
                    names.append((node.lineno, name.id))
    return names


def test_no_two_classes_or_constants_share_a_name():
    where = defaultdict(list)
    for path in _source_files("twisted_broker", "webui"):
        for line, name in _public_names(_tree(path)):
            if not any(fnmatch(_rel(path), pattern) for pattern in ROLE_NAMES.get(name, ())):
                where[name].append(f"{_rel(path)}:{line}")
    shared = [f"{name}: " + ", ".join(places) for name, places in sorted(where.items())
              if len({place.partition(":")[0] for place in places}) > 1]
    assert not shared, "\n".join(shared)


def _repository_files() -> set[str]:
    files = set()
    for directory, subdirectories, names in os.walk(ROOT):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(".") and d != "__pycache__"]
        files.update((Path(directory, name).relative_to(ROOT).as_posix()) for name in names)
    return files


def _docstrings_and_comments(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    texts = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                    and isinstance(node.body[0].value.value, str):
                first = node.body[0]
                for offset, text in enumerate(first.value.value.splitlines()):
                    texts.append((first.lineno + offset, text))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            texts.append((token.start[0], token.string))
    return texts


def test_cited_paths_exist():
    files = _repository_files()
    missing = []
    for path in _source_files(*PACKAGES):
        for line, text in _docstrings_and_comments(path):
            for match in _CITED_PATH.finditer(_URL.sub("", text)):
                cited = match.group(1).removeprefix("./")
                if cited.rpartition("/")[2] in NOT_REPOSITORY_FILES:
                    continue
                if not any(f == cited or f.endswith("/" + cited) for f in files):
                    missing.append(f"{_rel(path)}:{line}: cites {cited}, which is not in the repository")
    assert not missing, "\n".join(missing)


def floors_markdown() -> str:
    """FLOORS as a Markdown table, top floor first (``python tests/unit/test_architecture.py``
    prints it for docs/architecture.md)."""
    rows = ["| floor | unit | may import |", "|---|---|---|"]
    for unit, (floor, allowed) in sorted(FLOORS.items(), key=lambda item: (-item[1][0], item[0])):
        names = allowed if allowed == EVERY_UNIT_BELOW else ", ".join(sorted(allowed)) or "nothing of the project"
        rows.append(f"| {floor} | {unit} | {names} |")
    return "\n".join(rows)


def test_the_table_renders_every_unit():
    assert all(f"| {unit} |" in floors_markdown() for unit in FLOORS)


def test_docs_architecture_draws_this_table():
    # The map must not drift from the rules: docs/architecture.md carries FLOORS as printed.
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert floors_markdown() in doc, "docs/architecture.md: paste `python tests/unit/test_architecture.py`"


if __name__ == "__main__":
    print(floors_markdown())
