"""The docs as a reference, and kept so (#48): README.md and docs/*.md checked against the code.

What is checked, each by a small function that a unit test below feeds a bad snippet:

- every ``typed-decisions …`` / ``typed-decisions-export …`` line in a code block **parses** with
  the real CLI (the command's own argparse parser is run on it; the command never executes);
- every ``--flag`` of an inline ``typed-decisions CMD …`` span is an option of that command;
- every model name an example uses (``"model": …``, ``--model …``, ``Decider.load(…)``) resolves
  through the catalogue (``typed_decisions.models.resolve``, with ``:int8``) or is one of the
  names the server answers to by default;
- every repository path in backticks or in a link exists (a ``file.py::test_name`` names a test
  that is in the file);
- a count the docs state about the code (operations of the OpenAPI schema, the schemathesis test's
  requests) equals the code's, read from the code;
- no diary: load averages in prose, "shared with", "paused", "ran out of time", "this task",
  "this session", "found and fixed" (``DIARY``);
- the budget: README ≤ 160 lines, docs/ ≤ 2,600 lines, and the README's first code block holds the
  two commands CI and the quickstart run.

Pure Python, no model: the CLI parsers are imported, never their work.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 160
DOCS_MAX_LINES = 2600
README_COMMANDS = ("./scripts/quickstart.sh", "./scripts/test.sh")

# Phrases that narrate how a run went rather than what the software does (#48).
DIARY = {
    "a load average in prose": r"\bload(?:\s+averages?)?\s*(?:of\s+|at\s+|around\s+|was\s+)?[≈~]?\s*\d",
    "shared with": r"\bshared with\b",
    "paused": r"\bpaused\b",
    "ran out of time": r"\bran out of time\b",
    "this task": r"\bthis task\b",
    "this session": r"\bthis session\b",
    "found and fixed": r"\bfound and fixed\b",
    "a dated finding": r"\bfound\s+(?:on\s+)?\d{4}-\d\d-\d\d",
}
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console", "text"}
PROGRAMS = {"typed-decisions", "typed-decisions-export"}
TOP_LEVEL = {"--version", "--help"}  # typed-decisions' own options (cli.main), before a command


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --------------------------------------------------------------------------- reading markdown


def code_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """(language, first line number, body) of every fenced block.

    >>> list(code_blocks("a\\n```bash\\nls\\n```\\nb"))
    [('bash', 3, 'ls\\n')]
    """
    for m in re.finditer(r"^( *)```([\w-]*)[^\n]*\n(.*?)^\1```", text, flags=re.M | re.S):
        yield m.group(2), text.count("\n", 0, m.start()) + 2, m.group(3)


def prose(text: str) -> str:
    """The text with its fenced blocks blanked (line numbers kept)."""
    return re.sub(r"^( *)```.*?^\1```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.M | re.S)


def inline_spans(text: str) -> Iterator[tuple[int, str]]:
    """(line number, content) of every `code span` outside fenced blocks."""
    body = prose(text)
    for m in re.finditer(r"(?<!`)`([^`\n]+)`(?!`)", body):
        yield body.count("\n", 0, m.start()) + 1, m.group(1)


# --------------------------------------------------------------------------- commands


def shell_commands(block: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line offset, program, argv) of each typed-decisions line of a shell block.

    Continuations are joined, ``$ `` prompts, ``VAR=value`` prefixes, ``/usr/bin/time -v`` and
    ``nice -n N`` are skipped, the command ends at a comment or a shell operator.

    >>> [(p, a) for _, p, a in shell_commands("$ X=1 typed-decisions serve --port 8000 &  # bg\\n")]
    [('typed-decisions', ['serve', '--port', '8000'])]
    >>> [(p, a) for _, p, a in shell_commands("python -m typed_decisions_export.cli tiny \\\\\\n  --out D\\n")]
    [('typed-decisions-export', ['tiny', '--out', 'D'])]
    """
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        line = re.sub(r"^\s*\$\s+", "", line)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:
            continue
        while tokens and (re.fullmatch(r"[A-Za-z_]\w*=.*", tokens[0]) or tokens[0] in ("nice", "time")):
            tokens = tokens[3:] if tokens[0] == "nice" and tokens[1:2] == ["-n"] else tokens[1:]
        if tokens[:2] == ["/usr/bin/time", "-v"]:
            tokens = tokens[2:]
        if not tokens:
            continue
        if Path(tokens[0]).name in ("python", "python3") and tokens[1:3] == ["-m", "typed_decisions_export.cli"]:
            program, rest = "typed-decisions-export", tokens[3:]
        elif Path(tokens[0]).name in ("python", "python3") and tokens[1:2] == ["-m"] and \
                re.fullmatch(r"benchmarks\.\w+", tokens[2] if len(tokens) > 2 else ""):
            program, rest = tokens[2], tokens[3:]
        elif Path(tokens[0]).name in PROGRAMS:
            program, rest = Path(tokens[0]).name, tokens[1:]
        else:
            continue
        argv = []
        for t in rest:
            if t in ("&", "&&", "|", "||", ";", ">", ">>", "<", "2>", "2>&1"):
                break
            argv.append(t)
        yield start, program, argv


class CommandError(Exception):
    """A documented command line that the CLI refuses (the message is argparse's)."""


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace | None) -> None:
        self.parser, self.namespace = parser, namespace


@contextlib.contextmanager
def _stop_at_parse(parse: bool) -> Iterator[None]:
    """Within: the first top-level ``parse_args`` (and the presets command's ``_parse``) raises
    ``_Parsed`` with its parser and, if ``parse``, the namespace: the command never runs."""
    from typed_decisions.presets import cli as presets_cli

    original, original_presets = argparse.ArgumentParser.parse_args, presets_cli._parse

    def parse_args(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        raise _Parsed(self, original(self, args, namespace) if parse else None)

    def presets_parse(argv: list[str]) -> Any:
        parser = presets_cli._parser()
        raise _Parsed(parser, original_presets(argv) if parse else None)

    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]
    presets_cli._parse = presets_parse
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        presets_cli._parse = original_presets


def _entry(program: str) -> Callable[[list[str]], Any]:
    if program.startswith("benchmarks."):  # a benchmark's main() parses sys.argv
        import importlib

        module = importlib.import_module(program)

        def run(argv: list[str]) -> Any:
            saved = sys.argv
            sys.argv = [program, *argv]
            try:
                return module.main()
            finally:
                sys.argv = saved
        return run
    if program == "typed-decisions":
        from typed_decisions.cli import main
    else:
        from typed_decisions_export.cli import main
    return main


def _run_to_parse(program: str, argv: list[str], parse: bool) -> _Parsed:
    err = io.StringIO()
    with _stop_at_parse(parse), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            _entry(program)(list(argv))
        except _Parsed as done:
            return done
        except SystemExit as e:
            if e.code == 0:  # --help
                return _Parsed(argparse.ArgumentParser(), None)
            lines = err.getvalue().strip().splitlines()
            raise CommandError(lines[-1] if lines else f"exit {e.code}") from None
    lines = err.getvalue().strip().splitlines()
    raise CommandError(lines[-1] if lines else "the command returned without parsing its arguments")


def parse_command(program: str, argv: list[str]) -> argparse.Namespace | None:
    """The namespace the CLI parses from ``argv``; ``CommandError`` with argparse's message if it refuses."""
    return _run_to_parse(program, argv, parse=True).namespace


def options_of(program: str, argv: list[str]) -> set[str]:
    """Every option string of the command ``argv`` starts (its subcommands' included)."""
    head = [a for a in argv[:1] if not a.startswith("-")] + (["--ray"] if "--ray" in argv else [])
    parser = _run_to_parse(program, head, parse=False).parser
    found: set[str] = set()
    todo = [parser]
    while todo:
        p = todo.pop()
        for action in p._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return found


def bad_commands(text: str) -> list[str]:
    """Code-block command lines the CLI refuses, as 'line N: command: why'."""
    out = []
    for lang, first, body in code_blocks(text):
        if lang not in SHELL_BLOCKS:
            continue
        for offset, program, argv in shell_commands(body):
            try:
                parse_command(program, argv)
            except CommandError as e:
                out.append(f"line {first + offset}: {program} {shlex.join(argv)}: {e}")
    return out


def bad_inline_flags(text: str) -> list[str]:
    """Inline `typed-decisions CMD --flag …` spans naming a flag the command does not have."""
    from typed_decisions.cli import COMMANDS

    out = []
    for line, span in inline_spans(text):
        words = span.split()
        if not words or words[0] not in PROGRAMS:
            continue
        program, argv = words[0], words[1:]
        flags = {w.split("=")[0] for w in argv if w.startswith("--")}
        if program == "typed-decisions" and (not argv or argv[0].startswith("-")):  # top-level options
            unknown = sorted(flags - TOP_LEVEL)
        elif program == "typed-decisions" and argv[0] not in COMMANDS:
            if not _is_placeholder(argv[0]):
                out.append(f"line {line}: `{span}`: no command {argv[0]!r}")
            continue
        else:
            unknown = sorted(flags - options_of(program, argv)) if flags else []
        if unknown:
            out.append(f"line {line}: `{span}`: no such flag {', '.join(unknown)}")
    return out


# --------------------------------------------------------------------------- model names


def _is_placeholder(value: str) -> bool:
    return (bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", value)) or any(c in value for c in "/\\~$<{…") or
            value.startswith(".") or value in ("", "..."))


def model_names(text: str) -> Iterator[tuple[int, str]]:
    """(line, name) of the model names examples use: ``"model": "x"``, ``--model x``, ``Decider.load("x")``."""
    patterns = (r'"model"\s*:\s*"([^"]*)"', r"--model[ =]([^\s`'\"|)\]]+)", r'Decider\.load\(\s*"([^"]*)"')
    for pattern in patterns:
        for m in re.finditer(pattern, text):
            value = m.group(1)
            if not _is_placeholder(value):
                yield text.count("\n", 0, m.start()) + 1, value


def _served_aliases() -> set[str]:
    from typed_decisions.server.settings import ServerSettings

    return set(ServerSettings().aliases)


def bad_model_names(text: str, aliases: set[str] | None = None) -> list[str]:
    """Model names that neither the catalogue nor the server's default aliases know."""
    from typed_decisions.errors import TypedDecisionsError
    from typed_decisions.exports import split_name
    from typed_decisions.models import resolve

    aliases = _served_aliases() if aliases is None else aliases
    out = []
    for line, name in model_names(text):
        if name in aliases:
            continue
        try:
            resolve(split_name(name)[0])
        except TypedDecisionsError as e:
            out.append(f"line {line}: model {name!r}: {str(e).split(';')[0]}")
    return out


# --------------------------------------------------------------------------- paths

_TRACKED: set[str] | None = None


def tracked() -> set[str]:
    """Files git tracks, and their folders (or, outside a git checkout, every file under ROOT)."""
    global _TRACKED
    if _TRACKED is None:
        try:
            files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                   check=True, timeout=30).stdout.split()
        except (OSError, subprocess.SubprocessError):
            files = [_rel(p) for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts]
        names = set(files)
        for f in files:
            parts = f.split("/")
            names.update("/".join(parts[:i]) for i in range(1, len(parts)))
        _TRACKED = names
    return _TRACKED


# Where a path in backticks may be rooted: the repository, and each package (`evaluation/run.py`).
BASES = ("", "typed_decisions/", "export/", "export/typed_decisions_export/", "integrations/langchain/",
         "integrations/dspy/", "integrations/ray/", "integrations/ray/ray_typed_decisions/", "tests/")
PATH_LIKE = re.compile(r"[\w.-]+(?:/[\w.*-]+)*/?(?:::[\w\[\]-]+)?")


def bad_path(span: str, names: set[str]) -> str | None:
    """Why ``span`` names a repository path that is not there; None if it exists or is no repository path.

    >>> names = {"typed_decisions", "typed_decisions/fit.py", "tests", "tests/t.py"}
    >>> bad_path("typed_decisions/fit.py", names), bad_path("ray/data/x.py", names), bad_path("GET/POST", names)
    (None, None, None)
    >>> bad_path("typed_decisions/evaluation/fit.py", names)
    'no typed_decisions/evaluation/fit.py'
    """
    if "/" not in span or not PATH_LIKE.fullmatch(span) or span.startswith("/"):
        return None
    path, _, test = span.partition("::")
    path = path.rstrip("/")
    first = path.split("/")[0]
    if first in ("..", "."):
        return None
    for base in BASES:
        if (base + first) not in names:
            continue
        full = base + path
        if "*" in full:
            if any(re.fullmatch(re.escape(full).replace(r"\*", "[^/]*"), n) for n in names):
                return None
            continue
        if full in names:
            if test and f"def {test.split('[')[0]}(" not in _text(ROOT / full):
                return f"no test {test} in {full}"
            return None
    roots = [b + first for b in BASES if (b + first) in names]
    return f"no {path}" if roots else None


def bad_paths(text: str, doc: Path | None = None) -> list[str]:
    """Repository paths in backticks or links that do not exist."""
    names = tracked()
    out = []
    for line, span in inline_spans(text):
        why = bad_path(span.strip(), names)
        if why:
            out.append(f"line {line}: `{span}`: {why}")
    if doc is not None:
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose(text)):
            target = m.group(1)
            if re.match(r"\w+://", target):
                continue
            full = (doc.parent / target).resolve()
            if not full.is_relative_to(ROOT) or _rel(full) not in names:
                out.append(f"line {text.count(chr(10), 0, m.start()) + 1}: link {target}: no such file")
    return out


# --------------------------------------------------------------------------- counts


def stated_counts(text: str) -> dict[str, list[int]]:
    """Counts the docs state about the code: OpenAPI operations, schemathesis' requests.

    >>> stated_counts("schemathesis sends 1,005 requests over all 7 operations")
    {'operations': [7], 'fuzz_requests': [1005]}
    """
    out: dict[str, list[int]] = {"operations": [], "fuzz_requests": []}
    for para in re.split(r"\n\s*\n", prose(text)):
        flat = " ".join(para.split())
        if re.search(r"openapi|schemathesis|operation", flat, re.I):
            out["operations"] += [int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*) operations\b", flat)]
        if re.search(r"schemathesis|TD_FUZZ_REQUESTS", flat):
            out["fuzz_requests"] += [int(n.replace(",", "")) for n in
                                     re.findall(r"(\d[\d,]*) (?:generated )?requests\b", flat)]
    return out


def code_counts() -> dict[str, set[int]]:
    """The same counts, read from the code: the app's OpenAPI schema and the schemathesis test's budgets."""
    from td_fakes import FakeDecider

    from typed_decisions.server import create_app

    schema = create_app(FakeDecider()).openapi()
    operations = sum(1 for item in schema["paths"].values() for method in item if method in
                     ("get", "post", "put", "patch", "delete", "head", "options"))
    source = _text(ROOT / "tests" / "test_server_schemathesis.py")
    budget = re.search(r"n = int\(os\.environ\.get\(\"TD_FUZZ_REQUESTS\"\) or \((\d+) if fast_tier\(.*?\) else (\d+)\)\)",
                       source)
    assert budget, "tests/test_server_schemathesis.py no longer states its request budgets as test_docs reads them"
    return {"operations": {operations}, "fuzz_requests": {int(budget.group(1)), int(budget.group(2))}}


def bad_counts(text: str, truth: Callable[[], dict[str, set[int]]] = code_counts) -> list[str]:
    """Stated counts that the code does not have (the code is read only when the docs state one)."""
    stated = stated_counts(text)
    if not any(stated.values()):
        return []
    known = truth()
    return [f"{what} {n}: the code has {sorted(known[what])}"
            for what, ns in stated.items() for n in ns if n not in known[what]]


# --------------------------------------------------------------------------- diary


def diary(text: str) -> list[str]:
    """Sentences that narrate a run (``DIARY``), as 'line N: what: the words'."""
    out = []
    body = prose(text)
    for what, pattern in DIARY.items():
        for m in re.finditer(pattern, body, flags=re.I):
            line = body.count("\n", 0, m.start()) + 1
            out.append(f"line {line}: {what}: {m.group(0)!r}")
    return out


# --------------------------------------------------------------------------- the docs

IDS = [_rel(p) for p in DOC_FILES]


@pytest.mark.parametrize("doc", DOC_FILES, ids=IDS)
def test_documented_commands_parse(doc: Path, monkeypatch: pytest.MonkeyPatch):
    for var in ("TYPED_DECISIONS_MODEL", "TYPED_DECISIONS_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert bad_commands(_text(doc)) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=IDS)
def test_inline_commands_name_real_flags(doc: Path):
    assert bad_inline_flags(_text(doc)) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=IDS)
def test_model_names_resolve(doc: Path):
    assert bad_model_names(_text(doc)) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=IDS)
def test_repository_paths_exist(doc: Path):
    assert bad_paths(_text(doc), doc) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=IDS)
def test_counts_are_the_codes(doc: Path):
    assert bad_counts(_text(doc)) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=IDS)
def test_no_diary(doc: Path):
    assert diary(_text(doc)) == []


def test_line_budget():
    readme = len(_text(ROOT / "README.md").splitlines())
    docs = {p.name: len(_text(p).splitlines()) for p in sorted((ROOT / "docs").glob("*.md"))}
    assert readme <= README_MAX_LINES, readme
    assert sum(docs.values()) <= DOCS_MAX_LINES, docs


def test_readme_starts_with_the_two_commands():
    """CI runs the README's test command; the quickstart is the first thing a newcomer runs."""
    _, _, first = next(code_blocks(_text(ROOT / "README.md")))
    assert [line.split()[0] for line in first.splitlines() if line.strip()] == list(README_COMMANDS)


# --------------------------------------------------------------------------- every check can fail


def test_a_bad_command_fails(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TYPED_DECISIONS_MODEL", raising=False)
    good = "```bash\ntyped-decisions serve --model default --port 8000\ntyped-decisions presets answer x --model default 'hi'\n```\n"
    assert bad_commands(good) == []
    for line in ("typed-decisions serve --model default --port eighty",      # not an int
                 "typed-decisions decide --model default --labels colours r.json",  # not a choice
                 "typed-decisions fit --data x.jsonl",                        # --model, --out required
                 "typed-decisions frobnicate",                                # no such command
                 "typed-decisions-export tiny --out D --quantize int4",
                 "typed-decisions serve --ray --model D --replicas two",
                 "python -m benchmarks.head_layers --model D --ks 2,8 --frobnicate",  # a benchmark's own flags
                 "python -m benchmarks.head_layers --ks 2,8"):                     # --model required
        assert len(bad_commands(f"```bash\n{line}\n```\n")) == 1, line
    assert bad_commands("```bash\npython -m benchmarks.head_layers --model D --ks 2,8 --test 80\n```\n") == []


def test_a_bad_inline_flag_fails():
    assert bad_inline_flags("use `typed-decisions serve --preset team.json` here") == []
    assert bad_inline_flags("use `typed-decisions serve --presets team.json`")[0].endswith("--presets")
    assert bad_inline_flags("`typed-decisions label --replicas 2`")  # a serve --ray flag, not label's
    assert bad_inline_flags("`typed-decisions evaluate`")


def test_a_bad_model_name_fails():
    ok = '{"model": "default"} --model default:int8 --model DIR --model ~/x Decider.load("tiny") "model": "jev-latest"'
    assert bad_model_names(ok, aliases={"jev-latest"}) == []
    assert len(bad_model_names('{"model": "qwen2.5-coder-1.5b-instruct"}', aliases=set())) == 1
    assert len(bad_model_names("typed-decisions decide --model defualt r.json", aliases=set())) == 1


def test_a_missing_path_fails():
    assert bad_paths("see `typed_decisions/heads.py` and `benchmarks/results/`") == []
    assert bad_paths("see `typed_decisions/evaluation/fit.py`")
    assert bad_paths("see `evaluation/fit.py`")  # under typed_decisions/, no such file
    assert bad_paths("see `tests/test_docs.py::test_no_such_test`")
    assert bad_paths("[x](nowhere.md)", ROOT / "docs" / "x.md")
    assert bad_paths("[x](ARCHITECTURE.md)", ROOT / "docs" / "x.md") == []


def test_a_wrong_count_fails():
    truth = lambda: {"operations": {9}, "fuzz_requests": {300, 2000}}  # noqa: E731
    assert bad_counts("schemathesis: 2,000 generated requests over all 9 operations", truth) == []
    assert len(bad_counts("schemathesis: 1,005 requests over all 7 operations", truth)) == 2
    assert bad_counts("no counts here", lambda: pytest.fail("the code is read only for a stated count")) == []


def test_diary_phrasing_fails():
    assert diary("The engine reads the labels.\n```\nload 5\n```\n") == []
    for bad in ("measured at load 4.1-4.6", "load average 58 at its start", "2 cores shared with CI",
                "their processes paused", "the session ran out of time", "this task drew no machine",
                "not measured this session", "Found and fixed (2026-12-03).", "(found 2026-12-05)"):
        assert diary(bad), bad


def test_the_budget_check_counts_lines():
    assert README_MAX_LINES < DOCS_MAX_LINES and len(DOC_FILES) > 5
