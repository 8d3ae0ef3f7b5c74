"""The README's Python snippets run as written, so they cannot drift from the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
DATA = Path(__file__).parent / "data"
# The root the README names; each run gets its own so that runs never see each other's fields.
ROOT = "/dev/shm/haar-readme"


def python_blocks() -> list[str]:
    """Every ```python block of the README, in order."""
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_a_python_snippet() -> None:
    assert python_blocks(), f"no ```python block in {README}"


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_snippet_runs_as_written(index: int) -> None:
    code = python_blocks()[index]
    assert ROOT in code, f"README python block {index} names no {ROOT} root; the test cannot isolate it"
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-readme-test-") as d:
        work = Path(d)
        shutil.copy(DATA / "era5-levels-members.grib", work / "fields.grib")
        script = work / "snippet.py"
        script.write_text(code.replace(ROOT, str(work / "store")))
        run = subprocess.run(
            [sys.executable, str(script)], cwd=work, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, f"README python block {index} failed:\n{run.stderr[-3000:]}"
        if "fdb.list(" in code:
            # Its list prints one line per field: member 0's param 129 at 500 hPa, at each of the
            # sample's 4 date-times.
            printed = [line for line in run.stdout.splitlines() if "'class': 'ea'" in line]
            assert len(printed) == 4, run.stdout
