"""Upstream's test_public_tests_explain_their_invariants: every Python test of the repository says in
a docstring what it holds the code to, so a failure names the broken contract, not only a line."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_python_test_has_a_docstring():
    """Each test_* function under tests/ (CPU and torch suites) carries a docstring."""
    files = sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(files) > 10
    missing = [f"{f.relative_to(ROOT)}::{node.name}"
               for f in files for node in ast.walk(ast.parse(f.read_text()))
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
               and ast.get_docstring(node) is None]
    assert not missing, "tests without a docstring: " + ", ".join(missing)
