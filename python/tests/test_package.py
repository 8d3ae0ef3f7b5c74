"""The package as shipped: panics become haar.Error, the stubs match the extension, every
public name is documented, and a typical program type-checks under mypy --strict."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import haar
from haar import _haar

PKG = Path(haar.__file__).parent
SOURCE = Path(__file__).resolve().parents[1]


def test_a_panic_in_the_library_is_a_haar_error_not_a_crash() -> None:
    with pytest.raises(haar.Error) as e:
        _haar._panic_for_tests()  # type: ignore[attr-defined]
    assert type(e.value) is haar.Error
    assert "internal error" in str(e.value) and "deliberate panic" in str(e.value)
    # the interpreter goes on: the store still works afterwards
    assert haar.BadRequestError.__mro__[1] is haar.Error


def test_exception_classes_subclass_the_builtin_they_resemble() -> None:
    assert issubclass(haar.MissingError, KeyError) and issubclass(haar.MissingError, haar.Error)
    assert issubclass(haar.BadRequestError, ValueError)
    assert issubclass(haar.StorageError, OSError)
    assert issubclass(haar.TimeoutError, TimeoutError)
    assert str(haar.MissingError("field x not found")) == "field x not found"


def test_stubs_name_what_the_extension_has() -> None:
    tree = ast.parse((PKG / "_haar.pyi").read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(_haar, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name not in ("__buffer__", "_buffer_info"):
                    assert hasattr(cls, item.name), f"{node.name}.{item.name} in the stub, not in the module"
            methods = {i.name for i in node.body if isinstance(i, ast.FunctionDef)}
            for name, _ in inspect.getmembers(cls):
                if not name.startswith("_") and name not in methods:
                    raise AssertionError(f"{node.name}.{name} in the module, not in the stub")


def test_every_public_name_has_a_docstring() -> None:
    for name in haar.__all__:
        obj = getattr(haar, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases (Selection, Config)
        assert inspect.getdoc(obj), name
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (callable(member) or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{name}.{attr}"


def test_typical_usage_type_checks_strictly() -> None:
    pytest.importorskip("mypy")
    if not (SOURCE / "haar" / "_haar.pyi").exists():
        pytest.skip("needs the source tree")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "haar", "tests/typing/usage.py"],
        cwd=SOURCE,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
