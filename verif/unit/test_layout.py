"""The layout of the product and of its tests.

No product module imports the tests, the product's imports form no circle, and every package
imports only from the layers below it (:data:`LAYERS`; imports inside functions count too); no
product module is longer than :data:`MAX_FILE_LINES` lines, no function than
:data:`MAX_FUNCTION_LINES`. Every test file
lies in a tier folder (verif/conftest.py), imports no other test file (shared helpers are in
verif/helpers.py), and a cocotb test module names itself (``MODULE``) by its own dotted path.
"""

import ast
from pathlib import Path

__all__ = []

ROOT = Path(__file__).resolve().parents[2]
VERIF = ROOT / "verif"
#: The tier folders of verif/ (verif/conftest.py marks their tests).
TIERS = ("unit", "block", "formal", "system")
#: Source folder of each product package.
PACKAGES = {"hw": "bertaccel.hw", "sw": "bertaccel.sw", "golden": "bertaccel.golden",
            "sim": "bertaccel.sim", "analysis": "bertaccel.analysis", "fpga": "bertaccel.fpga",
            "cluster": "bertaccel.cluster", "soc": "bertaccel.soc", "cli": "bertaccel.cli"}
#: The layers, lowest first: a package imports from its own and from lower layers only. The
#: top package ``bertaccel`` (sw/_pkg) is the facade on ``sw``; peers in a layer do not import
#: each other.
LAYERS = (("golden",), ("hw",), ("sim",), ("sw",), ("bertaccel",), ("analysis", "fpga"),
          ("cluster", "soc"), ("cli",))
#: The longest a product module may be (one job per file) ...
MAX_FILE_LINES = 700
#: ... and a function or method, docstring included.
MAX_FUNCTION_LINES = 100


def _modules():
    """``{dotted name: (path, is_package)}`` of every product module."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[0] == "_pkg":          # sw/_pkg is the top package, bertaccel itself
                out["bertaccel"] = (path, True)
                continue
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            out[".".join([package, *parts])] = (path, is_package)
    return out


def _imports(name, path, is_package, modules):
    """The product modules that ``name`` imports, anywhere in its body."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target.startswith("bertaccel"))
    return found


def test_no_product_module_imports_the_tests():
    offenders = [str(path.relative_to(ROOT)) for path, _ in _modules().values()
                 if "verif" in {alias for node in ast.walk(ast.parse(path.read_text()))
                                for alias in _names(node)}]
    assert not offenders, f"product modules that import verif: {offenders}"


def _names(node):
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names] + [
            alias.name.split(".")[1] for alias in node.names if alias.name.count(".") >= 1]
    if isinstance(node, ast.ImportFrom) and node.module:
        return node.module.split(".")[:2]
    return []


def test_imports_form_no_circle():
    modules = _modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {target for target in _imports(name, path, is_package, modules)
                       if target in modules and target not in ancestors and target != name}
    # A package's __init__ re-exports its modules; an edge into a package stands for its
    # modules, so only module-to-module edges are followed below a package.
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _package(module):
    """``hw`` for ``bertaccel.hw.pe``, ``bertaccel`` for the top package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_package_has_a_layer():
    layered = {name for layer in LAYERS for name in layer}
    assert layered == {*PACKAGES, "bertaccel"}


def test_packages_import_only_from_lower_layers():
    rank = {name: level for level, layer in enumerate(LAYERS) for name in layer}
    modules = _modules()
    upward = []
    for name, (path, is_package) in sorted(modules.items()):
        here = _package(name)
        for target in sorted(_imports(name, path, is_package, modules)):
            there = _package(target)
            if there != here and rank[there] >= rank[here]:
                upward.append(f"{path.relative_to(ROOT)} ({here}) imports {target} ({there})")
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def _test_files():
    return sorted(VERIF.rglob("test_*.py"))


def test_every_test_file_is_in_a_tier():
    astray = [str(path.relative_to(ROOT)) for path in _test_files()
              if len(path.relative_to(VERIF).parts) != 2
              or path.relative_to(VERIF).parts[0] not in TIERS]
    assert not astray, f"test files outside verif/{{{','.join(TIERS)}}}/: {astray}"


def test_no_test_file_imports_another():
    offenders = []
    for path in _test_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)} imports {name}" for name in names
                          if name.startswith("verif.") and name.rsplit(".", 1)[-1].startswith(
                              ("test_", "conftest"))]
    assert not offenders, offenders


def test_cocotb_modules_name_their_file():
    """The simulator imports a cocotb test module by the ``MODULE`` its pytest side passes."""
    wrong = []
    for path in _test_files():
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODULE"
                                                     for t in node.targets)):
                dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                if ast.literal_eval(node.value) != dotted:
                    wrong.append(f"{path.relative_to(ROOT)}: MODULE = "
                                 f"{ast.literal_eval(node.value)!r}, not {dotted!r}")
    assert not wrong, wrong


def test_every_package_is_installed():
    """Every product folder with an ``__init__.py`` is a package pyproject.toml installs."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    for name, (path, is_package) in _modules().items():
        if is_package:
            assert name in listed, f"{path.relative_to(ROOT)}: {name} is not in pyproject.toml"


def test_modules_and_functions_are_short():
    long = []
    for path, _ in _modules().values():
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: "
                                f"{size} lines")
    assert not long, "\n".join(long)
