"""One registry of message tags (archzoo/tags.py): its numbers are distinct, its blocks do
not overlap, no other module makes up a tag number, and docs/index.md lists them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from archzoo import tags
from archzoo.config import TOPOLOGIES

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("archzoo", "actors", "learners", "replay", "paramserver", "benchmarks", "examples")
MPI_TAG_UB = 32767  # the least upper bound on tags the MPI standard guarantees


def test_every_tag_number_is_taken_once() -> None:
    owners: dict[int, list[str]] = {}
    for name, numbers in tags.blocks(len(TOPOLOGIES)).items():
        for n in numbers:
            owners.setdefault(n, []).append(name)
    shared = {n: names for n, names in owners.items() if len(names) > 1}
    assert not shared, f"tag numbers taken twice: {shared}"
    assert all(isinstance(n, int) and 0 <= n <= MPI_TAG_UB for n in owners)
    assert tags.blocks(len(TOPOLOGIES))["PS_TAGS"] == (20, 21, 22)
    assert tags.PS_TAGS == tags.PSTags.at(20)


def test_the_check_sees_an_overlap() -> None:
    # a second parameter server at 21 would share two numbers with PS_TAGS
    assert set(tags.PSTags.at(21).numbers()) & set(tags.PS_TAGS.numbers()) == {21, 22}
    bench = tags.blocks(11)["TAG_BENCH_COMM"]  # eleven topologies would reach 310
    assert tags.TAG_ASYNC_BROADCAST_DEFAULT in bench


def test_the_registry_is_what_the_others_use() -> None:
    from archzoo import harness, paramserver

    assert paramserver.PSTags is tags.PSTags
    for name in ("TAG_CONTROL", "TAG_PARAMS", "TAG_UNROLL", "TAG_TRANSITIONS", "TAG_TOPOLOGY",
                 "TAG_SAMPLE_REQUEST", "TAG_SAMPLE_REPLY", "TAG_INFER_REQUEST",
                 "TAG_INFER_REPLY", "TAG_ACTIONS", "SAMPLE_TAGS", "REPLAY_TAGS"):
        assert getattr(harness, name) == getattr(tags, name), name


def _tag_literals(path: Path) -> list[str]:
    """Where ``path`` spells a tag as a number: ``TAG_X = 3``, ``X_TAGS = (4, 5)``,
    ``PSTags.at(20)``, ``tag=300``, ``def f(tag: int = 100)``."""
    tree = ast.parse(path.read_text(), str(path))
    where = []

    def numeric(node: ast.AST | None) -> bool:
        return node is not None and any(
            isinstance(n, ast.Constant) and type(n.value) is int for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any(re.search(r"(^|_)TAGS?(_|$)", n) for n in names) and numeric(node.value):
                where.append(f"{path.relative_to(ROOT)}:{node.lineno}: {', '.join(names)}")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "at" and \
                    isinstance(f.value, ast.Name) and f.value.id == "PSTags" and \
                    any(numeric(a) for a in node.args):
                where.append(f"{path.relative_to(ROOT)}:{node.lineno}: PSTags.at")
            where += [f"{path.relative_to(ROOT)}:{node.lineno}: {k.arg}="
                      for k in node.keywords if k.arg and k.arg.startswith("tag")
                      and numeric(k.value)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            pos = [*a.posonlyargs, *a.args]
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults, strict=True)) + \
                [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
            where += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}({arg.arg}=...)"
                      for arg, d in pairs if arg.arg.startswith("tag") and numeric(d)]
    return where


def test_no_other_module_makes_up_a_tag_number() -> None:
    found = []
    for d in SOURCES:
        for path in sorted((ROOT / d).rglob("*.py")):
            if path != ROOT / "archzoo" / "tags.py":
                found += _tag_literals(path)
    assert not found, "tag numbers outside archzoo/tags.py:\n" + "\n".join(found)
    # the check itself sees each form
    assert len(_tag_literals(ROOT / "archzoo" / "tags.py")) >= 10


def test_docs_list_the_registry() -> None:
    """docs/index.md's tag list is the registry's: every tag with its number, and the
    parameter server's block."""
    text = (ROOT / "docs" / "index.md").read_text()
    start = text.index("[tags.py](../archzoo/tags.py)")
    item = text[start:start + re.search(r"\n\s*- ", text[start:]).start()]
    listed = dict(re.findall(r"`(TAG_[A-Z_]+) = (\d+)`", item))
    want = {name: str(value) for name, value in vars(tags).items()
            if name.startswith("TAG_") and isinstance(value, int)}
    assert listed == want
    assert f"`PS_TAGS = PSTags.at({tags.PS_TAGS.push})`" in item
