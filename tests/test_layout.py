"""The package layout follows the data path: no module imports a later step, no cycles, no module
over 400 lines, and docs/architecture.md names every module.

Layers, lowest first: :data:`LAYERS`. A module may import its own layer and the layers below it
(module-level and function-level imports alike); ``relay_ext/__init__`` only wires the public names.
"""

import ast
from pathlib import Path
from typing import Dict, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["meta_rules", "relay_ext.frontend", "relay_ext.lowering", "relay_ext.measure",
          "relay_ext.workdir", "relay_ext.schedules", "relay_ext.tuning", "relay_ext.build",
          "relay_ext.deploy", "relay_ext.report", "relay_ext.peers", "relay_ext.latency", "relay_ext.cli"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    for index in reversed(range(len(LAYERS))):
        if module == LAYERS[index] or module.startswith(LAYERS[index] + "."):
            return index
    raise AssertionError(f"{module} belongs to no layer; add it to LAYERS or move it")


def _imports(path: Path) -> Set[str]:
    """Every quantfuse module ``path`` imports, relative imports resolved."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in ("meta_rules", "relay_ext")}


def _library_modules() -> Dict[str, Path]:
    paths = [*ROOT.glob("meta_rules/**/*.py"), *ROOT.glob("relay_ext/**/*.py")]
    return {_module_name(p): p for p in paths if _module_name(p) != "relay_ext"}


MODULES = _library_modules()
MAX_MODULE_LINES = 400


def _source_files():
    return sorted(p for p in [*ROOT.glob("meta_rules/**/*.py"), *ROOT.glob("relay_ext/**/*.py"),
                              *ROOT.glob("benchmarks/*.py")] if p.name != "__init__.py")


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _source_files()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these by role: {long}"


def test_architecture_doc_names_every_module_and_no_other():
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:relay_ext|meta_rules|benchmarks)/[\w/]+\.py)`", text))
    modules = {str(p.relative_to(ROOT)) for p in _source_files()}
    assert not modules - named, f"docs/architecture.md does not name {sorted(modules - named)}"
    assert not named - modules - {"meta_rules/__init__.py"}, \
        f"docs/architecture.md names modules that do not exist: {sorted(named - modules)}"


def _known(name: str) -> str:
    """The module an imported name refers to (``a.b.func`` -> ``a.b``)."""
    while name and name not in MODULES and name != "relay_ext":
        name = name.rpartition(".")[0]
    return name


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_later_step(module):
    mine = _layer(module)
    upward = []
    for imported in map(_known, _imports(MODULES[module])):
        if imported == "relay_ext":
            upward.append("relay_ext (import the module itself, not the package's lazy names)")
        elif imported and _layer(imported) > mine:
            upward.append(imported)
    assert not upward, f"{module} imports later steps: {sorted(upward)}"


def _assert_acyclic(graph: Dict[str, Set[str]], what: str) -> None:
    state: Dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError(f"{what} cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_no_import_cycles():
    graph = {m: {_known(i) for i in _imports(p)} - {"", "relay_ext", m} for m, p in MODULES.items()}
    # A package imports its own submodules by design (its __init__ re-exports); that is no cycle.
    graph = {m: {i for i in deps if not i.startswith(m + ".")} for m, deps in graph.items()}
    _assert_acyclic(graph, "import")
    _assert_acyclic(_meta_rules_folder_graph(graph), "meta_rules folder")


def test_the_tree_reads_as_the_data_path():
    packages = sorted(p.name for p in (ROOT / "relay_ext").iterdir()
                      if (p / "__init__.py").exists())
    assert packages == sorted(layer.split(".")[1] for layer in LAYERS[1:])
    assert not [p.name for p in (ROOT / "relay_ext").glob("*.py") if p.name != "__init__.py"]
    for package in packages:
        doc = ast.get_docstring(ast.parse((ROOT / "relay_ext" / package / "__init__.py").read_text()))
        assert doc and len(doc) > 80, f"relay_ext/{package}/__init__.py needs a docstring naming its step"


# --- begin: regroup ---
# meta_rules' folders: what each may import of meta_rules, lowest first. base/ imports nothing
# else of meta_rules; analysis/ reads TIR with base/'s help; generic/, cpu/ and gpu/ hold the rules
# and import only base/ and analysis/ (never each other); the top level (the rule sets, the
# database intrinsics) puts them together per target; measure/ and testing/ build on it. The
# package's own __init__ (its face) wires the public names and may import any of them.
META_RULES_TOP = {"__init__", "rule_sets", "database_intrinsics"}
META_RULES_MAY_IMPORT = {
    "base": {"base"},
    "analysis": {"base", "analysis"},
    "generic": {"base", "analysis", "generic"},
    "cpu": {"base", "analysis", "cpu"},
    "gpu": {"base", "analysis", "gpu"},
    "top": {"base", "analysis", "generic", "cpu", "gpu", "top"},
    "measure": {"base", "analysis", "top", "measure"},
    "testing": {"base", "analysis", "generic", "cpu", "gpu", "top", "testing"},
}
META_RULES_FOLDERS = [f for f in META_RULES_MAY_IMPORT if f != "top"]


def _meta_rules_folder(module: str) -> str:
    """base, analysis, generic, cpu, gpu, measure, testing, or top (meta_rules' own modules)."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (ROOT / "meta_rules" / parts[1]).is_dir()):
        return parts[1]
    return "top"


def _meta_rules_folder_graph(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    """Which meta_rules folder imports which, from the module graph (the package face left out)."""
    folders: Dict[str, Set[str]] = {}
    for module, deps in graph.items():
        if module.startswith("meta_rules."):
            mine = _meta_rules_folder(module)
            folders.setdefault(mine, set()).update(
                _meta_rules_folder(d) for d in deps if d.startswith("meta_rules."))
            folders[mine].discard(mine)
    return folders


def test_meta_rules_top_level_holds_only_its_face_and_what_composes_the_folders():
    top = sorted(p.stem for p in (ROOT / "meta_rules").glob("*.py"))
    assert set(top) <= META_RULES_TOP, f"move {sorted(set(top) - META_RULES_TOP)} into a folder"
    folders = sorted(p.name for p in (ROOT / "meta_rules").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(META_RULES_FOLDERS), "a meta_rules folder needs its line in META_RULES_MAY_IMPORT"
    for folder in META_RULES_FOLDERS:
        init = ROOT / "meta_rules" / folder / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), init


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("meta_rules.")))
def test_meta_rules_folders_import_only_what_they_may(module):
    folder = _meta_rules_folder(module)
    allowed = META_RULES_MAY_IMPORT[folder]
    wrong = sorted(i for i in map(_known, _imports(MODULES[module]))
                   if i.startswith("meta_rules") and (i == "meta_rules" or _meta_rules_folder(i) not in allowed))
    assert not wrong, f"{module} ({folder}/) may import only {sorted(allowed)} of meta_rules, not {wrong}"


def test_the_folder_cycle_check_sees_a_cycle():
    graph = {"meta_rules.base.a": {"meta_rules.analysis.b"}, "meta_rules.analysis.b": {"meta_rules.base.c"},
             "meta_rules.base.c": set()}
    with pytest.raises(AssertionError, match="analysis -> base -> analysis"):
        _assert_acyclic(_meta_rules_folder_graph(graph), "meta_rules folder")
# --- end: regroup ---
