"""The package as shipped: panics become haar.Error, the stubs match the extension, every
public name is documented, and a typical program type-checks under mypy --strict."""

from __future__ import annotations

import ast
import shutil
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


def test_the_extension_ships_without_debug_info() -> None:
    # The wheel's build strips DWARF (pyproject.toml's rustc-args); symbols stay, for panics.
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) not installed")
    sections = subprocess.run(
        [readelf, "-S", "--wide", _haar.__file__], capture_output=True, text=True, check=True
    ).stdout
    assert ".debug_info" not in sections and ".debug_line" not in sections, _haar.__file__
    assert ".symtab" in sections
    assert Path(_haar.__file__).stat().st_size < 15_000_000


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


def other_pythons() -> list[str]:
    """CPython interpreters ≥ 3.10 other than this one, where installed (pyenv or PATH)."""
    found = []
    pyenv = Path.home() / ".pyenv" / "versions"
    for minor in (10, 11, 12, 13, 14):
        candidates = sorted(pyenv.glob(f"3.{minor}.*/bin/python3.{minor}")) + [Path(p) for p in [shutil.which(f"python3.{minor}")] if p]
        exe = str(candidates[0]) if candidates else None
        if exe and minor != sys.version_info.minor:
            r = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
            if r.returncode == 0:
                found.append(exe)
    return found


SMOKE = """
import gc, sys, tempfile
import haar
assert haar.__file__.startswith(sys.argv[1]), haar.__file__
tmp = tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-py-abi3-")
fdb = haar.FDB({"backend": "pmem", "roots": [tmp.name]})
key = {"class": "od", "expver": "0001", "stream": "oper", "date": "20261121", "time": "1200",
       "domain": "g", "type": "fc", "levtype": "sfc", "step": "0", "param": "167"}
fdb.archive(b"GRIB" + bytes(range(256)) * 8 + b"7777", identifier=key)
fdb.flush()
h1, h2 = fdb.retrieve(key), fdb.retrieve(key)
v1, v2 = memoryview(h1), memoryview(h2)
assert h1.lent and v1.readonly and bytes(v1) == h1.read() and bytes(v1[:4]) == b"GRIB"
try:
    v1[0] = 1
    raise SystemExit("a writable view")
except TypeError:
    pass
del h1, fdb
gc.collect()
assert bytes(v1) == bytes(v2)
del v1, v2, h2
gc.collect()
tmp.cleanup()
print("ok")
"""


@pytest.mark.parametrize("python", other_pythons() or [None])
def test_the_abi3_module_works_on_other_pythons(python: str | None, tmp_path: Path) -> None:
    """One abi3 wheel for CPython >= 3.10: the same compiled module, buffer export included
    (registered by hand for 3.10), imported by every other interpreter found here."""
    if python is None:
        pytest.skip("no other CPython >= 3.10 installed")
    shutil.copytree(PKG, tmp_path / "haar", ignore=shutil.ignore_patterns("__pycache__", "earthkit.py"))
    r = subprocess.run(
        [python, "-c", SMOKE, str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
