"""The docs stand alone and cannot go stale.

For README.md and every Markdown file under docs/ (fenced code blocks included where said):

- **Links.** Every relative link, ``[text](path)``, ``[text](path#anchor)``, ``[text](#anchor)``
  or ``[text][ref]`` with ``[ref]: path``, points at a file or folder inside the repository;
  an anchor must be a heading of the target (GitHub's slugs); ``#L123`` line anchors are
  refused.
- **Code names.** Every inline code span that names code resolves in the repository's Python
  files (archzoo/, actors/, learners/, replay/, paramserver/, benchmarks/, tests/,
  examples/) or, for environment variables, in launch/. See ``check_span`` for what counts
  as a name and what is skipped. In a table row or list item that starts with a link to a
  Python file ("the code involved" tables), the names must be defined in that very file, so
  a class that moves to another file is reported too.
- **Flags.** Every ``--flag`` is accepted by the parser it is given to: in a command
  (``archzoo run impala --actors 2``, ``archzoo study ... -- --total-steps 4000``,
  ``archzoo bench comm --sizes 1KB``, ``python benchmarks/bench_X.py --solve``) that
  command's parser; anywhere else, some archzoo parser or benchmark script. A value after a
  flag with fixed choices (``--topology tree``) must be one of them.
- **Stand-alone.** No page names documents the repository does not hold (DESIGN.md, the
  "seed" texts, a book's section numbers), code by line number, or paths outside the
  repository; every page of docs/ and README.md links to docs/references.md.

The parsers are built in-process (``archzoo.cli.build_parser`` per architecture, the
examples' ``archzoo run examples.MODULE:NAME`` included, ``archzoo.study.build_parser``,
``archzoo.benchcomm.build_parser``, ``archzoo.plot.build_parser``); the benchmark scripts
build theirs inside ``main``, so their flags are read from their ``add_argument`` calls with
``ast``. Apart from the modules that building the parsers imports (archzoo's and the
examples'), Python sources are only parsed with ``ast``. No process is started.

Each test lists every problem it finds, one per line as ``file:line: item: why``.

Limits of the heuristics: a name is found if it is defined anywhere in the code (only
``Class.member``, ``package.module.name`` and the rows above are held to a place), so a
doc that names a function which still exists but no longer does what the page says passes;
``variable.attr`` (``learner.version``) checks only ``attr``; one lower-case word, math
(non-ASCII spans, single letters, ``x_s``) and upper-case words inside longer spans
(acronyms in quoted messages) are not checked;
flags outside a command are checked against all parsers together, not the page's
architecture; the names of other libraries are listed in ``EXTERNAL_*`` below.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import keyword
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("archzoo", "actors", "learners", "replay", "paramserver", "benchmarks", "tests",
               "examples")
REPO_DIRS = (*SOURCE_DIRS, "launch", "docs")
SOURCE_SUFFIXES = (".py", ".md", ".sh", ".sbatch", ".toml")
COMMANDS = {"archzoo", "python", "python3", "torchrun", "mpiexec", "mpirun", "srun", "sbatch",
            "pip", "pytest", "ruff", "bash", "sh", "git"}

# Roots of dotted names that belong to other libraries: `torch.autograd.grad`, `os._exit`.
EXTERNAL_ROOTS = {
    "torch", "nn", "F", "np", "numpy", "os", "sys", "math", "gym", "gymnasium", "MPI", "mpi4py",
    "queue", "threading", "time", "json", "subprocess", "random", "argparse", "importlib",
    "signal", "typing", "collections", "functools", "itertools", "re", "pathlib", "shutil",
    "tomllib", "pytest", "hypothesis", "matplotlib", "plt", "dist",
}
# Names from other libraries that the docs write bare: torch's layers and `where`, the
# reference implementations' names quoted by the architecture pages.
EXTERNAL_NAMES = {
    "Linear", "ReLU", "where", "log_softmax", "SampleToInsertRatio", "ThreadDynamicAdjustment",
    "LOG_EPSILON", "Work", "COMM_WORLD", "BYTE", "ERRORS_RETURN", "Isend", "Irecv", "Ibarrier",
    "Iallreduce", "Ibcast", "Dup", "Test", "Iprobe", "is_completed", "Issend",
    # gymnasium and ale-py names on the pixels page
    "AtariVectorEnv", "SyncVectorEnv", "AtariPreprocessing", "FrameStackObservation",
}
# torch.nn.Module / optimizer / gymnasium methods called on the repository's objects.
EXTERNAL_ATTRS = {"load_state_dict", "state_dict", "backward", "zero_grad", "parameters",
                  "reset", "step", "detach", "cpu", "grad"}

FORBIDDEN = [
    (re.compile(r"DESIGN\.md"), "names DESIGN.md, which the repository does not have"),
    (re.compile(r"(?i)\bseeds?\s+(?:text\s+)?0\d\d\b"), "names a seed document"),
    (re.compile(r"(?i)\bseeds/"), "names the seed documents' folder"),
    (re.compile(r"(?i)\bseed text\b"), "names the seed text"),
    (re.compile(r"§\s*12\.\d"), "cites a book section; cite the original paper"),
    (re.compile(r"(?i)\b(?:algorithm|algorithms|alg\.|eq\.|equation|fig\.|figure)\s*12\.\d"),
     "cites the book's numbering; cite the original paper's"),
    (re.compile(r"[\w./-]*\.py:\d+"), "cites code by line number; name the function"),
    (re.compile(r"(?<![\w-])L\d+(?:[–-]L?\d+)?\b"),
     "cites code by line number; name the function"),
    (re.compile(r"\.\./shared\b|/work/"), "points outside the repository"),
    (re.compile(r"\bMEASURED_[A-Z_]+\b"), "is a placeholder: paste the measured numbers"),
]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
INLINE_LINK = re.compile(r"!?\[((?:[^\]\[]|\[[^\]]*\])*)\]"
                         r"\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"(?<!\])\[((?:[^\]\[]|\[[^\]]*\])+)\]\[([^\]]*)\]")
REF_DEF = re.compile(r"^\s{0,3}\[([^\]]+)\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?:(=|[ \t]+)([^\s`]+))?")
CHAIN = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(\()?")
STRING_LITERAL = re.compile(r"\"[^\"]*\"|'[^']*'")
ENV_ID = re.compile(r"-v\d+$")


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------
def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def split_lines(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, lines inside fenced code blocks), each as (1-based number, text)."""
    prose: list[tuple[int, str]] = []
    fenced: list[tuple[int, str]] = []
    inside = False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        (fenced if inside else prose).append((i, line))
    return prose, fenced


def code_spans(prose: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """(line number, text) of every inline code span; a span may run over lines of one
    paragraph."""
    paragraph: list[tuple[int, str]] = []
    for n, line in [*prose, (-1, "")]:
        if line.strip() and (not paragraph or paragraph[-1][0] == n - 1):
            paragraph.append((n, line))
            continue
        if paragraph:
            text = "\n".join(t for _, t in paragraph)
            for m in CODE_SPAN.finditer(text):
                span = " ".join(m.group(2).split()).replace("\\|", "|")
                yield paragraph[0][0] + text.count("\n", 0, m.start()), span
        paragraph = [(n, line)] if line.strip() else []


def without_code_spans(line: str) -> str:
    return CODE_SPAN.sub(" ", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = (c for c in text
            if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc")
    return "".join(kept).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    return anchors_of(path.read_text(encoding="utf-8"))


def anchors_of(text: str) -> frozenset[str]:
    prose, _ = split_lines(text)
    seen: Counter[str] = Counter()
    out = set()
    for _, line in prose:
        m = HEADING.match(line)
        if m:
            s = slug(m.group(2))
            out.add(s if seen[s] == 0 else f"{s}-{seen[s]}")
            seen[s] += 1
    return frozenset(out)


def check_link(doc: Path, target: str, own: frozenset[str]) -> str | None:
    """Why `target`, linked from `doc` whose own headings' anchors are `own`, is broken."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path, _, anchor = target.partition("#")
    if not path:
        return None if anchor in own else f"no heading with anchor #{anchor} on this page"
    dest = (doc.parent / path).resolve()
    if dest != ROOT and ROOT not in dest.parents:
        return "points outside the repository"
    if not dest.exists():
        return "no such file or folder"
    if anchor:
        if re.fullmatch(r"L\d+(?:-L?\d+)?", anchor):
            return "a line-number anchor; name the function instead"
        if dest.suffix == ".md" and anchor not in anchors(dest):
            return f"no heading with anchor #{anchor} in {rel(dest)}"
    return None


# ---------------------------------------------------------------------------------------------
# The code: definitions, strings, flags
# ---------------------------------------------------------------------------------------------
@dataclass
class ClassInfo:
    members: set[str] = field(default_factory=set)
    bases: list[str] = field(default_factory=list)


@dataclass
class CodeIndex:
    names: set[str] = field(default_factory=set)  # every def, class, assignment, parameter
    strings: set[str] = field(default_factory=set)  # identifier-like string literals, env vars
    top: dict[str, set[str]] = field(default_factory=dict)  # module -> its top-level names
    file_names: dict[str, set[str]] = field(default_factory=dict)  # path -> names defined in it
    by_basename: dict[str, list[str]] = field(default_factory=dict)  # "apex" -> modules
    classes: dict[str, list[ClassInfo]] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)  # every file's repository path


def _module_name(path: str) -> str:
    """A source file's dotted name as installed: the components' folders are archzoo's
    subpackages (``actors/base.py`` is ``archzoo.actors.base``)."""
    parts = path[:-3].split("/")
    if parts[0] in ("actors", "learners", "replay", "paramserver"):
        parts.insert(0, "archzoo")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_names(body: list[ast.stmt]) -> Iterator[str]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        yield n.id
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                yield (a.asname or a.name).split(".")[0]
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _top_level_names(getattr(node, block, []))
            for h in getattr(node, "handlers", []):
                yield from _top_level_names(h.body)


def _class_info(node: ast.ClassDef) -> ClassInfo:
    info = ClassInfo(bases=[ast.unparse(b).split(".")[-1].split("[")[0] for b in node.bases])
    info.members.update(_top_level_names(node.body))
    for n in ast.walk(node):
        if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name) and n.value.id == "self"):
            info.members.add(n.attr)
    return info


@cache
def code_index() -> CodeIndex:
    idx = CodeIndex()
    for p in (q for d in REPO_DIRS for q in (ROOT / d).rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            idx.files.add(rel(p))
    this = rel(Path(__file__).resolve())  # its made-up names must not count as defined
    for path in sorted(f for f in idx.files if f.endswith(".py") and f.split("/")[0]
                       in SOURCE_DIRS and f != this):
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path)
        module = _module_name(path)
        idx.top[module] = set(_top_level_names(tree.body))
        idx.by_basename.setdefault(module.split(".")[-1], []).append(module)
        defined: set[str] = set()
        docstrings = {id(b.body[0].value) for b in ast.walk(tree)
                      if isinstance(b, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                        ast.AsyncFunctionDef))
                      and b.body and isinstance(b.body[0], ast.Expr)}
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
                if isinstance(n, ast.ClassDef):
                    idx.classes.setdefault(n.name, []).append(_class_info(n))
            elif isinstance(n, ast.arg):
                defined.add(n.arg)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                defined.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                defined.add(n.attr)
            elif isinstance(n, ast.keyword) and n.arg:
                defined.add(n.arg)
            elif (isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and id(n) not in docstrings and re.fullmatch(r"[A-Za-z_]\w*", n.value)):
                idx.strings.add(n.value)  # a key, a field, a column, an environment variable
        idx.file_names[path] = defined | idx.top[module]
        idx.names |= defined
    for path in idx.files:
        if path.startswith("launch/"):
            text = (ROOT / path).read_text(encoding="utf-8")
            idx.strings.update(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", text))
            idx.strings.update(re.findall(r"\b([A-Z_][A-Z0-9_]*)=", text))
    return idx


Flags = dict[str, "frozenset[str] | None"]  # option -> its choices (None: any value)


def _parser_flags(parser: argparse.ArgumentParser) -> Flags:
    out: Flags = {}
    for action in parser._actions:  # argparse has no public way to list its options
        for opt in action.option_strings:
            out[opt] = None if action.choices is None else frozenset(map(str, action.choices))
    return out


def _script_flags(path: Path) -> Flags:
    out: Flags = {}
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "add_argument"):
            choices = None
            for k in n.keywords:
                if k.arg == "choices" and isinstance(k.value, (ast.Tuple, ast.List)):
                    choices = frozenset(str(e.value) for e in k.value.elts
                                        if isinstance(e, ast.Constant))
            for a in n.args:
                if isinstance(a, ast.Constant) and str(a.value).startswith("-"):
                    out[a.value] = choices
    return out


def _merge(*many: Flags) -> Flags:
    out: Flags = {}
    for flags in many:
        for opt, choices in flags.items():
            if opt not in out:
                out[opt] = choices
            elif out[opt] is None or choices is None:
                out[opt] = None
            else:
                out[opt] = out[opt] | choices
    return out


def example_architectures() -> list[str]:
    """``examples.MODULE:NAME`` of every ``NAME = Architecture(...)`` in examples/: the
    architectures the tutorial runs with ``archzoo run examples.MODULE:NAME``."""
    found = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and ast.unparse(node.value.func).split(".")[-1] == "Architecture"):
                found += [f"examples.{path.stem}:{t.id}" for t in node.targets
                          if isinstance(t, ast.Name)]
    return found


@cache
def parsers() -> dict[str, Flags]:
    """Flags per command: "run ARCH" (the built-in architectures and the examples'), "run"
    (any architecture), "eval", "list", "study", "bench comm", "plot", "benchmarks/NAME.py", and
    "any" (all of them)."""
    from archzoo import benchcomm, plot, simhosts, study
    from archzoo.architectures import ARCHITECTURES
    from archzoo.benchlearn.cli import parser as benchlearn_parser
    from archzoo.cli import build_parser

    out: dict[str, Flags] = {}
    for arch in [*ARCHITECTURES, *example_architectures()]:
        sub = next(a for a in build_parser(arch)._actions
                   if isinstance(a, argparse._SubParsersAction))
        out[f"run {arch}"] = _parser_flags(sub.choices["run"])
        out["eval"] = _parser_flags(sub.choices["eval"])
        out["list"] = _parser_flags(sub.choices["list"])
    out["run"] = _merge(*(v for k, v in out.items() if k.startswith("run ")))
    out["study"] = _parser_flags(study.build_parser())
    out["bench comm"] = _parser_flags(benchcomm.build_parser())
    out["bench learning"] = _merge(*(_parser_flags(sp) for a in benchlearn_parser()._actions
                                     if isinstance(a, argparse._SubParsersAction)
                                     for sp in a.choices.values()))
    out["plot"] = _parser_flags(plot.build_parser())
    out["simhosts"] = _merge(*(_parser_flags(sp) for a in simhosts.build_parser()._actions
                               if isinstance(a, argparse._SubParsersAction)
                               for sp in a.choices.values()))
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        out[rel(script)] = _script_flags(script)
    out["benchmarks/bench_learning.py"] = out["bench learning"]  # archzoo bench learning
    # Out of context a flag's value is checked against the choices `archzoo run` gives it
    # (`--topology tree`), although `archzoo study --topology` takes any list.
    out["any"] = {opt: out["run"][opt] if out["run"].get(opt) is not None else choices
                  for opt, choices in _merge(*out.values()).items()}
    return out


# ---------------------------------------------------------------------------------------------
# Checking one item
# ---------------------------------------------------------------------------------------------
def _check_flags(text: str, flags: Flags, where: str) -> list[str]:
    problems = []
    for m in FLAG.finditer(text):
        opt, value = m.group(1), m.group(3)
        if opt not in flags:
            problems.append(f"{opt}: not a flag of {where}")
            continue
        choices = flags[opt]
        if choices is not None and value and m.group(2) is not None:
            value = value.strip("[](){}.,;:")
            if re.fullmatch(r"[a-z][a-z0-9_]*(?:[|,][a-z][a-z0-9_]*)*", value):
                bad = [v for v in re.split(r"[|,]", value) if v not in choices]
                if bad:
                    problems.append(f"{opt} {value}: {', '.join(bad)} is not one of "
                                    f"{', '.join(sorted(choices))}")
    return problems


def _command_tokens(text: str) -> list[str] | None:
    toks = [t.strip("[](){}") for t in text.split()]
    while toks and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", toks[0]):
        toks.pop(0)  # FOO=1 archzoo ...
    if toks and toks[0] == "$":
        toks.pop(0)
    if not toks:
        return None
    first = toks[0].rsplit("/", 1)[-1]
    return toks if first in COMMANDS or toks[0].endswith((".py", ".sh")) else None


def check_command(text: str) -> list[str] | None:
    """Flags of a shell command line, by the parser they are given to; None if `text` is not
    a command. Only archzoo and the benchmark scripts are checked; other programs' flags
    (torchrun's, pytest's, pip's) are not."""
    code, _, comment = text.partition(" #")
    if _command_tokens(code) is None:
        return None
    p = parsers()
    problems = _check_flags(comment, p["any"], "archzoo") if comment else []
    for seg in re.split(r"&&|;", code):
        toks = _command_tokens(seg)
        if not toks:
            continue
        for i, t in enumerate(toks):
            script = re.search(r"(benchmarks/\w+\.py)$", t)
            if script and script.group(1) in p:
                rest = " ".join(toks[i + 1:])
                problems += _check_flags(re.sub(r"'[^']*'", "''", rest), p[script.group(1)],
                                         script.group(1))
                break
            if t.rsplit("/", 1)[-1] == "archzoo" and (i == 0 or toks[i - 1] == "-m"
                                                       or "/" in t):
                problems += _check_archzoo(toks[i + 1:], p)
                break
    return problems


def _check_archzoo(args: list[str], p: dict[str, Flags]) -> list[str]:
    if not args:
        return []
    sub = args[0]
    if sub == "run" and len(args) > 1:
        key = f"run {args[1]}" if f"run {args[1]}" in p else "run"
        return _check_flags(" ".join(args[2:]), p[key], f"archzoo {key}")
    if sub == "study":
        rest = args[1:]
        cut = rest.index("--") if "--" in rest else len(rest)
        arch = rest[rest.index("--arch") + 1] if "--arch" in rest[:cut - 1] else None
        key = f"run {arch}" if f"run {arch}" in p else "run"
        return (_check_flags(" ".join(rest[:cut]), p["study"], "archzoo study")
                + _check_flags(" ".join(rest[cut + 1:]), p[key], f"archzoo {key}"))
    if sub == "bench" and args[1:2] == ["comm"]:
        return _check_flags(" ".join(args[2:]), p["bench comm"], "archzoo bench comm")
    if sub == "bench" and args[1:2] == ["learning"]:
        return _check_flags(" ".join(args[2:]), p["bench learning"], "archzoo bench learning")
    if sub == "eval":
        return _check_flags(" ".join(args[1:]), p["eval"], "archzoo eval")
    if sub == "list":
        return _check_flags(" ".join(args[1:]), p["list"], "archzoo list")
    if sub == "plot":
        return _check_flags(" ".join(args[1:]), p["plot"], "archzoo plot")
    return _check_flags(" ".join(args), p["any"], "archzoo")


def _class_has(name: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
    idx = code_index()
    for info in idx.classes.get(name, []):
        if member in info.members:
            return True
        for base in info.bases:
            if base in idx.classes and base not in seen and _class_has(base, member,
                                                                       seen | {name}):
                return True
    return False


def _module_of(parts: list[str]) -> tuple[str, list[str]] | None:
    idx = code_index()
    for n in range(len(parts), 0, -1):
        module = ".".join(parts[:n])
        if module in idx.top:
            return module, parts[n:]
    return None


def _check_members(owner: str, rest: list[str], top: set[str]) -> str | None:
    if not rest:
        return None
    if rest[0] not in top:
        return f"{rest[0]} is not defined in {owner}"
    if len(rest) > 1 and rest[0] in code_index().classes and not _class_has(rest[0], rest[1]):
        return f"class {rest[0]} has no {rest[1]}"
    return None


def check_name(chain: str, call: bool, alone: bool = True) -> str | None:
    """Why a name in a code span does not resolve; None if it does or is not checked.
    `alone`: the name is the whole span (an upper-case word among others is an acronym)."""
    idx = code_index()
    parts = chain.split(".")
    root = parts[0]
    if root in EXTERNAL_ROOTS or keyword.iskeyword(root):
        return None
    if len(parts) == 1:
        if root in EXTERNAL_NAMES or hasattr(builtins, root):
            return None
        if len(root) == 1 or re.fullmatch(r"[A-Za-z]_[A-Za-z0-9]{1,5}", root):
            return None  # math: V, x_s, t_max
        camel = re.fullmatch(r"[A-Z]\w*[a-z]\w*", root) is not None
        if camel or call:
            return None if root in idx.names else "not defined in the code"
        if "_" in root or (alone and re.fullmatch(r"[A-Z][A-Z0-9]+", root)):
            return None if root in idx.names | idx.strings else "not defined in the code"
        return None  # one lower-case word: a value, a key or prose
    if root in SOURCE_DIRS:
        found = _module_of(parts)
        if found is None:
            return f"no module {chain}"
        module, rest = found
        submodules = {m.split(".")[-1] for m in idx.top if m.startswith(module + ".")}
        if rest and rest[0] in submodules:
            return None
        return _check_members(module, rest, idx.top[module])
    if root in idx.classes:
        return None if _class_has(root, parts[1]) else f"class {root} has no {parts[1]}"
    if re.fullmatch(r"[A-Z]\w*[a-z]\w*", root):
        return f"no class {root}"
    if root in idx.by_basename:
        for module in idx.by_basename[root]:
            if _check_members(module, parts[1:], idx.top[module]) is None:
                return None
    last = parts[-1]
    if last in idx.names | idx.strings | EXTERNAL_ATTRS:
        return None  # an attribute of a variable: `learner.version`, `client.exchange`
    return f"{last} is not defined in the code"


def check_path(path: str, name: str | None) -> str | None:
    idx = code_index()
    if ENV_ID.search(path):
        return None  # an environment id: archzoo/Synthetic-v0
    if "/" in path:
        if path.split("/")[0] not in REPO_DIRS:
            return None  # an output path: runs/..., DIR/comm.md
        module, dot, attr = path.rpartition(".")
        if not (ROOT / path).exists() and dot and (ROOT / f"{module}.py").is_file():
            path, name = f"{module}.py", attr  # benchmarks/solving.time_to_target
        if not (ROOT / path).exists():
            return "no such file or folder"
        candidates = [path.rstrip("/")]
    else:
        if not path.endswith(SOURCE_SUFFIXES):
            return None  # config.json, policy.pt: files of a run
        candidates = sorted(f for f in idx.files if f.rsplit("/", 1)[-1] == path)
        if not candidates:
            return "no such file in the repository"
    if name and not any(name in idx.file_names.get(c, set()) for c in candidates):
        return f"{name} is not defined in {' or '.join(candidates)}"
    return None


PATH_SPAN = re.compile(r"(?P<path>[\w.-]*(?:/[\w.-]*)+|[\w.-]+\.(?:py|md|sh|sbatch|toml|json|csv"
                       r"|pt|png|txt))(?::\d+(?:[-–]\d+)?|\s*(?:::|:)\s*"
                       r"(?P<name>[A-Za-z_]\w*)(?:\(\))?)?")


def is_path(m: re.Match[str] | None) -> bool:
    """A path, not names joined by a slash (`Isend/Irecv`, `Client.request/receive`)."""
    if m is None:
        return False
    path = m.group("path")
    return ("/" not in path or path.split("/")[0] in REPO_DIRS or path.endswith("/")
            or "-" in path or re.search(r"\.[a-z]{1,6}$", path) is not None)


def check_span(span: str) -> list[str]:
    """Problems with one inline code span.

    - A shell command: its flags, by the parser they are given to (``check_command``).
    - Flags anywhere else (``--topology tree``): known to some archzoo parser or benchmark
      script, and a value among the flag's choices where it has fixed ones.
    - A path (``learners/vtrace.py``, ``archzoo/comm/``, ``test_nstep.py``), optionally with a
      name (``tests/test_x.py::test_y``, ``factory.py: make_topology``): the file exists in
      the repository and defines the name. Paths outside the repository's folders (run
      directories, ``DIR/...``), run files (``.json``, ``.csv``, ``.pt``) and environment ids
      (``archzoo/Synthetic-v0``) are skipped.
    - Otherwise the names in it, string literals removed (``check_name``):
      ``package.module.Name`` must be defined there; ``Class.member`` a member of the class
      (or of its bases in the repository); ``module.name`` (``apex.run_single``) a name of
      a module with that file name; ``variable.attr`` (``learner.version``) only checks that
      ``attr`` is defined somewhere; bare ``CamelCase`` and ``call()`` names must be defined
      (def, class, assignment, parameter); bare ``snake_case`` and ``ALL_CAPS`` names may
      also be string literals (schema fields, summary.json keys, environment variables).
      One lower-case word (``obs``, ``sync``), single letters and subscripts (``x_s``,
      ``t_max``) are math or prose and are skipped, as are spans with non-ASCII characters
      (formulas) or ``<placeholders>``.
    """
    problems = check_command(span)
    if problems is not None:
        return problems
    problems = _check_flags(span, parsers()["any"], "any archzoo command or benchmark")
    rest = FLAG.sub(" ", span).strip()
    if not rest or any(ord(c) > 127 for c in rest) or re.search(r"<\w", rest):
        return problems
    m = PATH_SPAN.fullmatch(rest)
    if is_path(m):
        why = check_path(m.group("path"), m.group("name"))
        return problems + ([f"{why}"] if why else [])
    for chain, call, alone in span_names(rest):
        why = check_name(chain, call=call, alone=alone)
        if why:
            problems.append(f"{chain}: {why}")
    return problems


def span_names(rest: str) -> list[tuple[str, bool, bool]]:
    """(dotted name, written as a call, is the whole span) for each name in a span of code,
    its flags and string literals removed."""
    code = STRING_LITERAL.sub(" ", rest)
    code = re.sub(r"\b(\w+)\.(\w+)/(\w+)\b", r"\1.\2 \1.\3", code)  # `A.request/receive`
    return [(m.group(1), m.group(2) is not None,
             re.fullmatch(r"\s*" + re.escape(m.group(1)) + r"(\(\))?\s*", code) is not None)
            for m in CHAIN.finditer(code)]


def row_file(doc: Path, line: str, defs: dict[str, str]) -> str | None:
    """The Python file a table row or list item is about, when it starts with a link to one:
    `| [archzoo/nets.py](../archzoo/nets.py) | ... |`, `- [base.py](../x/base.py): ...`."""
    m = re.match(r"^\s*(?:\|\s*|[-*]\s+)\[([^\]]*)\](?:\(([^)\s]+)\)|\[([^\]]*)\])", line)
    if m is None:
        return None
    target = m.group(2) or defs.get((m.group(3) or m.group(1)).lower(), "")
    path = (doc.parent / target.partition("#")[0]).resolve()
    if path.suffix != ".py" or not path.is_file() or ROOT not in path.parents:
        return None
    return rel(path)


def row_problems(path: str, spans: list[str]) -> list[str]:
    """The code names in a row about `path` must be defined in that file: a row of "the code
    involved" goes stale when a class moves to another file."""
    idx = code_index()
    problems = []
    for span in spans:
        if check_command(span) is not None:
            continue
        rest = FLAG.sub(" ", span).strip()
        if not rest or any(ord(c) > 127 for c in rest) or is_path(PATH_SPAN.fullmatch(rest)):
            continue
        for chain, call, _ in span_names(rest):
            head, *members = chain.split(".")
            if (head in EXTERNAL_ROOTS or head in EXTERNAL_NAMES or keyword.iskeyword(head)
                    or hasattr(builtins, head) or head in code_index().by_basename
                    or not (call or "_" in head or re.fullmatch(r"[A-Z]\w*[a-z]\w*", head))):
                continue
            if head not in idx.file_names[path]:
                problems.append(f"`{span}`: {head} is not defined in {path}, the file of this row")
            elif members and head in idx.classes and not _class_has(head, members[0]):
                problems.append(f"`{span}`: class {head} has no {members[0]}")
    return problems


# ---------------------------------------------------------------------------------------------
# Checking a page
# ---------------------------------------------------------------------------------------------
def ref_defs(prose: list[tuple[int, str]]) -> dict[str, str]:
    """The page's link reference definitions, `[ref]: path`."""
    return {m.group(1).lower(): m.group(2) for _, line in prose if (m := REF_DEF.match(line))}


def link_problems(doc: Path, text: str) -> list[str]:
    prose, _ = split_lines(text)
    defs = ref_defs(prose)
    problems = []
    for n, line in prose:
        line = without_code_spans(line)
        targets = [m.group(2) for m in INLINE_LINK.finditer(line)]
        if REF_DEF.match(line):
            targets.append(REF_DEF.match(line).group(2))
        for m in REF_LINK.finditer(INLINE_LINK.sub(" ", line)):
            ref = (m.group(2) or m.group(1)).lower()
            if ref not in defs:
                problems.append(f"{rel(doc)}:{n}: [{m.group(1)}][{m.group(2)}]: "
                                "no link definition")
        for target in targets:
            why = check_link(doc, target, anchors_of(text))
            if why:
                problems.append(f"{rel(doc)}:{n}: ({target}): {why}")
    return problems


def code_problems(doc: Path, text: str) -> list[str]:
    prose, fenced = split_lines(text)
    problems = []
    for n, span in code_spans(prose):
        problems += [f"{rel(doc)}:{n}: `{span}`: {why}" for why in check_span(span)]
    defs = ref_defs(prose)
    for n, line in prose:
        path = row_file(doc, line, defs)
        if path:
            spans = [s for _, s in code_spans([(n, line)])]
            problems += [f"{rel(doc)}:{n}: {why}" for why in row_problems(path, spans)]
        plain = INLINE_LINK.sub(r"\1", without_code_spans(line))
        problems += [f"{rel(doc)}:{n}: {why}" for why in
                     _check_flags(plain, parsers()["any"], "any archzoo command or benchmark")]
    for n, line in fenced:
        found = check_command(line.strip())
        if found is None:
            found = _check_flags(line, parsers()["any"], "any archzoo command or benchmark")
        problems += [f"{rel(doc)}:{n}: {why}" for why in found]
    return problems


def standalone_problems(doc: Path, text: str) -> list[str]:
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, why in FORBIDDEN:
            for m in pattern.finditer(line):
                problems.append(f"{rel(doc)}:{n}: {m.group(0)!r}: {why}")
    return problems


def _report(problems: list[str]) -> str:
    return f"{len(problems)} problem(s) in the docs:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------
def test_relative_links_resolve() -> None:
    problems = [p for d in doc_files() for p in link_problems(d, d.read_text(encoding="utf-8"))]
    assert not problems, _report(problems)


def test_code_names_paths_and_flags_resolve() -> None:
    problems = [p for d in doc_files() for p in code_problems(d, d.read_text(encoding="utf-8"))]
    assert not problems, _report(problems)


def test_docs_stand_alone() -> None:
    problems = [p for d in doc_files()
                for p in standalone_problems(d, d.read_text(encoding="utf-8"))]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        if page.name == "references.md":
            continue
        links = [m.group(2) for _, line in split_lines(page.read_text(encoding="utf-8"))[0]
                 for m in INLINE_LINK.finditer(line)]
        if not any(t.split("#")[0].endswith("references.md") for t in links):
            problems.append(f"{rel(page)}: no link to docs/references.md")
    assert not problems, _report(problems)


def test_the_checks_catch_stale_docs() -> None:
    """Each check reports a broken item in a made-up page, so the tests above can fail."""
    page = ROOT / "docs" / "made-up.md"
    text = "\n".join([
        "# Made up",
        "See [gone](no-such-page.md), [index](index.md#no-such-heading) and [ok](#made-up).",
        "`ImpalaLearnerThatWasRenamed`, `learners/vtrace.py::no_such_function`,",
        "`archzoo.comm.NoSuchThing`, `StarPublisher.no_such_method`, `no_such_helper()`,",
        "`archzoo run impala --no-such-flag`, `--topology hexagon`, `impala.py:12`.",
        "As DESIGN.md and seed 004 say (L40–42), see [there](../../outside.md).",
        "MEASURED_PIXELS",
        "",
        "| [learners/vtrace.py](../learners/vtrace.py) | `ImpalaLearner` |",
        "```",
        "archzoo run apex --unroll-length 20",
        "python benchmarks/bench_learning.py grid --seeds 0 --no-such-grid-flag",
        "```",
    ])
    links = link_problems(page, text)
    assert [p.split(": ", 1)[1] for p in links] == [
        "(no-such-page.md): no such file or folder",
        "(index.md#no-such-heading): no heading with anchor #no-such-heading in docs/index.md",
        "(../../outside.md): points outside the repository",
    ]
    code = "\n".join(code_problems(page, text))
    for item in ("ImpalaLearnerThatWasRenamed", "no_such_function", "NoSuchThing",
                 "no_such_method", "no_such_helper",
                 "--no-such-flag: not a flag of archzoo run impala", "hexagon is not one of",
                 "--unroll-length: not a flag of archzoo run apex",
                 "--no-such-grid-flag: not a flag of benchmarks/bench_learning.py",
                 "ImpalaLearner is not defined in learners/vtrace.py"):
        assert item in code, code
    assert "--seeds" not in code, code  # the learning benchmark's own flag
    alone = "\n".join(standalone_problems(page, text))
    for item in ("DESIGN.md", "seed 004", "L40–42", "impala.py:12", "MEASURED_PIXELS"):
        assert item in alone, alone


def test_the_pages_quote_the_learning_records_as_they_are() -> None:
    """docs/results.md was drawn from the records the store holds now, and every results
    block of an architecture's page (``<!-- results: ARCH -->``) says what the store says:
    a record added, removed or changed since means `archzoo bench learning page` again."""
    from archzoo.benchlearn import store
    from archzoo.benchlearn.cli import STORE
    from archzoo.benchlearn.page import BLOCK, fill_blocks, group, records_digest

    records = store.read(STORE)
    docs = ROOT / "docs"
    assert f"records digest {records_digest(records)}" in (docs / "results.md").read_text()
    groups = group(records, "minatar", 5.0)
    for page in sorted(docs.glob("*.md")):
        text = page.read_text()
        if BLOCK.search(text):
            assert fill_blocks(text, groups) == text, f"{rel(page)}: a stale results block"


def test_the_docs_stay_short_enough_to_read() -> None:
    """docs/*.md under 4,000 lines, with docs/results.md at its own budget of 250 (the grid,
    once full, must still fit); a generated benchmark table belongs in benchmarks/results/."""
    pages = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "docs").glob("*.md")}
    assert pages["results.md"] <= 250, pages["results.md"]
    assert sum(pages.values()) - pages["results.md"] + 250 < 4000, sorted(pages.items())
