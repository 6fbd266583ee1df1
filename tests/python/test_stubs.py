"""The type stubs (_hotpath.pyi) describe the compiled module as it is: the same names, classes,
methods and properties; and they ship beside it with py.typed."""
import ast
import pathlib
import types

import hotpath
from hotpath import _hotpath

PACKAGE = pathlib.Path(hotpath.__file__).resolve().parent


def stub_tree():
    return ast.parse((PACKAGE / "_hotpath.pyi").read_text())


def members(node):
    names = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    return names


def runtime_members(obj):
    return {n for n in dir(obj) if not n.startswith("__") or n in ("__version__", "__init__", "__enter__", "__exit__", "__len__", "__getitem__")}


def test_stub_files_ship_with_the_package():
    assert (PACKAGE / "_hotpath.pyi").is_file() and (PACKAGE / "py.typed").is_file()


def test_module_names_match():
    tree = stub_tree()
    stubbed = members(tree) - {"_ZooEntry", "_WarmUp", "_Metrics"}  # typing-only TypedDicts
    runtime = runtime_members(_hotpath)
    assert stubbed == runtime, f"only in the stub: {stubbed - runtime}; only in the module: {runtime - stubbed}"


def test_class_members_match():
    for node in stub_tree().body:
        if isinstance(node, ast.ClassDef) and hasattr(_hotpath, node.name):
            cls = getattr(_hotpath, node.name)
            if issubclass(cls, BaseException):
                continue
            stubbed = members(node)
            runtime = {n for n in runtime_members(cls) if not n.startswith("_") or n in stubbed}
            assert stubbed == runtime, f"{node.name}: only in the stub: {stubbed - runtime}; only at run time: {runtime - stubbed}"


def test_package_exports():
    # Submodules (hotpath.ray, imported on demand) are not exports.
    public = {n for n in dir(hotpath) if not n.startswith("_") and not isinstance(getattr(hotpath, n), types.ModuleType)}
    assert set(hotpath.__all__) == public | {"__version__"}
