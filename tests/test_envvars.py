"""The launcher's ``ARCHZOO_*`` environment variables live in one module (archzoo/envvars.py):
each a constant with its docstring; no other module spells one, and the launch scripts use
no other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from archzoo import envvars

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("archzoo", "actors", "learners", "replay", "paramserver", "benchmarks", "examples")


def test_each_variable_is_a_constant_with_a_docstring() -> None:
    tree = ast.parse((ROOT / "archzoo" / "envvars.py").read_text())
    documented = {}
    for stmt, after in zip(tree.body, tree.body[1:], strict=False):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and \
                isinstance(stmt.value.value, str) and stmt.value.value.startswith("ARCHZOO_"):
            doc = after.value.value if isinstance(after, ast.Expr) and \
                isinstance(after.value, ast.Constant) else None
            documented[stmt.value.value] = doc
    assert set(documented) == set(envvars.ALL) and len(envvars.ALL) == 11
    assert all(doc and len(doc) > 40 for doc in documented.values()), documented
    for name in envvars.ALL:
        assert name == "ARCHZOO_" + next(k for k, v in vars(envvars).items() if v == name)


def test_no_other_module_spells_one() -> None:
    found = []
    for d in SOURCES:
        for path in sorted((ROOT / d).rglob("*.py")):
            if path == ROOT / "archzoo" / "envvars.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                        re.search(r"ARCHZOO_[A-Z]", node.value) and not _is_docstring(node, path):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
                elif isinstance(node, ast.keyword) and node.arg and \
                        node.arg.startswith("ARCHZOO_"):
                    found.append(f"{path.relative_to(ROOT)}:{node.value.lineno}: {node.arg}=")
    assert not found, "ARCHZOO_* spelt outside archzoo/envvars.py:\n" + "\n".join(found)


def _is_docstring(node: ast.Constant, path: Path) -> bool:
    for owner in ast.walk(ast.parse(path.read_text())):
        if isinstance(owner, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and owner.body and isinstance(owner.body[0], ast.Expr) and \
                owner.body[0].value.lineno == node.lineno:
            return True
    return False


def test_the_launch_scripts_use_the_same_names() -> None:
    used = set()
    for script in (ROOT / "launch").glob("*.sh"):
        used |= set(re.findall(r"\bARCHZOO_[A-Z_]+", script.read_text()))
    assert used and used <= set(envvars.ALL), used - set(envvars.ALL)


def test_the_helpers_read_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(envvars.LAUNCH_TIME, "12.5")
    assert envvars.launch_time() == 12.5
    monkeypatch.delenv(envvars.MPI_SURVIVE, raising=False)
    assert not envvars.mpi_survive()
    monkeypatch.setenv(envvars.MPI_SURVIVE, "1")
    assert envvars.mpi_survive()
    for var, mark in ((envvars.STARTED_FILE, envvars.mark_started),
                      (envvars.DONE_FILE, envvars.mark_done)):
        monkeypatch.setenv(var, str(tmp_path / var))
        mark()
        assert (tmp_path / var).exists()
