"""The host imports nothing of the runtime but the contract, and the contract nothing but the standard library.

The runtime runs inside a run's containers from a read-only volume; the host shares with it only what the
contract (`ssebench.runtime.contract`) writes down (docs/architecture.md, "Two sides"). The imports are read
from the source (ast), not by importing it: a module imported only inside a function, or by name through
importlib, counts as much as one at the top.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST_PACKAGES = ("ssebench", "pytest_ssebench")
RUNTIME = "ssebench.runtime"
CONTRACT = "ssebench.runtime.contract"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool) -> Iterator[str]:
    """Every module a module's source imports: `import a.b`, `from a import b` (as `a.b`, and `a`), relative
    imports resolved against `module`, and importlib's `import_module("a.b")` / `__import__("a.b")`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.args[0].value


def forbidden_imports(root: Path, packages: tuple[str, ...] = HOST_PACKAGES) -> list[str]:
    """`module imports runtime-module` for each host module (every module of `packages` under `root` outside
    the runtime package) that imports a runtime module other than the contract."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(root, path)
            if module == RUNTIME or module.startswith(RUNTIME + "."):
                continue  # the runtime's own modules import one another
            for name in imported_modules(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
                # `from ssebench.runtime import contract` names the package too: only its modules count.
                if name.startswith(RUNTIME + ".") and not (name == CONTRACT or name.startswith(CONTRACT + ".")):
                    found.append(f"{module} imports {name}")
    return found


def test_the_host_imports_no_runtime_module_but_the_contract() -> None:
    assert forbidden_imports(ROOT) == []
    # Control: the host does import the contract, and the walk sees it.
    imports = {
        name
        for path in (ROOT / "ssebench").glob("*.py")
        for name in imported_modules(path.read_text(), module_name(ROOT, path), False)
    }
    assert CONTRACT in imports


def test_the_contract_imports_nothing_but_the_standard_library() -> None:
    path = ROOT / "ssebench" / "runtime" / "contract.py"
    imports = set(imported_modules(path.read_text(), CONTRACT, False))
    tops = {name.split(".")[0] for name in imports}
    assert tops and tops <= set(sys.stdlib_module_names) | {"__future__"}, tops - set(sys.stdlib_module_names)


# A host package with one runtime module of each kind imported in each way the walk must see.
PLANTED = {
    "ssebench/__init__.py": "",
    "ssebench/runtime/__init__.py": "",
    "ssebench/runtime/contract.py": "import json\n",
    "ssebench/runtime/daemon.py": "from ssebench.runtime import bencher\n",  # the runtime's own: never counted
    "ssebench/good.py": "from ssebench.runtime import contract\nfrom ssebench.runtime.contract import MODEL\n",
    "ssebench/top.py": "import ssebench.runtime.entrypoint\n",
    "ssebench/named.py": "from ssebench.runtime import contract, phase\n",
    "ssebench/lazy.py": "def f():\n    from ssebench.runtime.daemon import main\n    return main\n",
    "ssebench/sub/__init__.py": "from ..runtime.tree import prepare_tree\n",
    "ssebench/sub/deeper.py": "from ..runtime import capture\n",
    "ssebench/dynamic.py": "import importlib\nimportlib.import_module('ssebench.runtime.bencher')\n",
    "pytest_ssebench/plugin.py": "from ssebench.runtime.evaluator import main\n",
}


def test_the_walk_finds_a_planted_runtime_import_however_it_is_written(tmp_path: Path) -> None:
    for name, text in PLANTED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = forbidden_imports(tmp_path)
    assert found == [
        "ssebench.dynamic imports ssebench.runtime.bencher",
        "ssebench.lazy imports ssebench.runtime.daemon",
        "ssebench.lazy imports ssebench.runtime.daemon.main",
        "ssebench.named imports ssebench.runtime.phase",
        "ssebench.sub imports ssebench.runtime.tree",
        "ssebench.sub imports ssebench.runtime.tree.prepare_tree",
        "ssebench.sub.deeper imports ssebench.runtime.capture",
        "ssebench.top imports ssebench.runtime.entrypoint",
        "pytest_ssebench.plugin imports ssebench.runtime.evaluator",
        "pytest_ssebench.plugin imports ssebench.runtime.evaluator.main",
    ]


@pytest.mark.parametrize("planted", ["from ssebench.runtime.settings import ENV\n", "import ssebench.runtime.layout\n"])
def test_the_walk_fails_the_real_tree_with_one_planted_import(tmp_path: Path, planted: str) -> None:
    for package in HOST_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            target = tmp_path / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    assert forbidden_imports(tmp_path) == []  # control: the copy is as clean as the tree
    (tmp_path / "ssebench" / "run.py").write_text((tmp_path / "ssebench" / "run.py").read_text() + planted)
    assert forbidden_imports(tmp_path)[0].startswith("ssebench.run imports ssebench.runtime.")


def import_cycles(root: Path, package: str) -> list[list[str]]:
    """The cycles among a package's modules' imports (at the top, in functions, or for type checking alike),
    each as the modules around it, the first repeated at the end."""
    modules = {module_name(root, path): path for path in sorted((root / package).rglob("*.py"))}
    graph = {
        module: sorted(
            {
                name
                for name in imported_modules(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
                if name in modules and name != module and name != package
            }
        )
        for module, path in modules.items()
    }
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycles.append([*trail[trail.index(module) :], module])
            return
        if module in done:
            return
        for name in graph[module]:
            visit(name, [*trail, module])
        done.add(module)

    for module in graph:
        visit(module, [])
    return cycles


def test_the_plugins_modules_import_one_another_one_way() -> None:
    """Collection, the report and the sweep each have one job: the sweep glues them to pytest's hooks, and none
    of them imports back a module that imports it."""
    assert import_cycles(ROOT, "pytest_ssebench") == []


def test_a_cycle_planted_among_a_packages_modules_is_found(tmp_path: Path) -> None:
    package = tmp_path / "plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sweep.py").write_text("from plugin.collect import Item\nfrom plugin import report\n")
    (package / "report.py").write_text("def f():\n    from plugin.collect import RECORD\n")
    (package / "collect.py").write_text("from plugin.report import identity\n")
    assert import_cycles(tmp_path, "plugin") == [["plugin.collect", "plugin.report", "plugin.collect"]]
    (package / "report.py").write_text("RECORD = 1\n")
    assert import_cycles(tmp_path, "plugin") == []
