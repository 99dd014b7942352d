"""Docstrings state contracts; measurements live in the docs that record them.

A measured result in a module's docstring ("cut p90 from 380 to 45 ms", "24 of
15,543 calls CANCELLED") ages silently as the code changes; docs/operations.md
and docs/performance.md record them with how they were measured. This check
looks for the two shapes such results take: a count out of a total, and a
before/after pair with a unit.
"""
from __future__ import annotations

import ast
import re

from serving.checkout import REPO_ROOT
from tests.readme.test_no_local_paths import tracked_files

MEASURED = re.compile(
    r"\b\d[\d,]* of \d[\d,]{2,} (?:calls|requests)\b"                    # 24 of 15,543 calls
    r"|\bfrom \d[\d,.]* ?(?:ms|s|µs|MB|MiB|GB)? to \d[\d,.]* ?(?:ms|s|µs|MB|MiB|GB)(?!\w)"  # from 380 to 45 ms
)
PRODUCT = ("serving/", "exporter/", "loadtest/", "monitoring/", "gateway/", "deploy/", "benchmarks/")


def measured_docstrings(sources: dict[str, str]) -> list[str]:
    found = []
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node) or ""
                found += [f"{name}: {m.group(0)}" for m in MEASURED.finditer(" ".join(doc.split()))]
    return found


def test_no_product_docstring_carries_a_measurement():
    sources = {name: (REPO_ROOT / name).read_text() for name in tracked_files()
               if name.endswith(".py") and name.startswith(PRODUCT)}
    assert measured_docstrings(sources) == []


def test_the_check_sees_both_shapes():
    source = '"""Freezing cut decode p90\nfrom 380 to 45 ms.\n\n24 of 15,543 calls were CANCELLED."""\n' \
             'def f():\n    """Reads 8 of 16 bytes; counts from 1 to 10."""\n'
    assert measured_docstrings({"m.py": source}) == ["m.py: from 380 to 45 ms", "m.py: 24 of 15,543 calls"]
