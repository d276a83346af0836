"""No import circles in the package.

Read from the source: every import of every module under lib/drillbook, at module level or
inside a function (a deferred import still ties the two modules together), outside
`if TYPE_CHECKING:` (annotations only). A circle is found even where Python happens to resolve it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPOSITORY

ROOT = REPOSITORY / "lib"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "drillbook").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, wherever it is, except under `if TYPE_CHECKING:`."""
    annotations_only = {id(node) for branch in ast.walk(tree)
                        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
                        for node in ast.walk(branch)}
    return [node for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in annotations_only]


def import_graph() -> dict[str, set[str]]:
    """Which package modules each module imports. `from pkg import sub` counts as an import of
    pkg.sub alone: pkg is already being imported as sub's parent."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        wanted: set[str] = set()
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                wanted.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                submodules = {f"{base}.{alias.name}" for alias in node.names} & known.keys()
                wanted |= submodules
                if len(submodules) < len(node.names):
                    wanted.add(base)
        graph[name] = {module for module in wanted if module in known and module != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_finder_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_the_real_package():
    graph = import_graph()
    assert "drillbook.evidence.bundle" in graph["drillbook.evidence.verify"]
    assert "drillbook.errors" in graph["drillbook.config"]


def test_no_module_of_the_package_imports_itself_in_a_circle():
    assert circles(import_graph()) == []


def test_importing_drillbooks_chaos_runner_leaves_chaostoolkits_logging_alone():
    # A plain `chaos run` loads drillbook's control and providers: its progress lines must stay.
    import logging

    code = ("import logging; logging.getLogger('chaostoolkit').setLevel(logging.INFO); "
            "import drillbook.chaos.runner, drillbook.chaos.control, drillbook.chaos.actions; "
            "print(logging.getLogger('chaostoolkit').level)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) == logging.INFO
    from drillbook.chaos.runner import chaoslib_quiet

    logger = logging.getLogger("chaostoolkit")
    before = logger.level
    with chaoslib_quiet():
        assert logger.level == logging.ERROR
    assert logger.level == before
