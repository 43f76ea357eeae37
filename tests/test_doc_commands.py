"""Documentation that runs: every command and snippet in README.md and docs/**/*.md is
extracted from the Markdown (never copied here) and executed.

What is extracted: every fenced block of README.md and of every page under docs/ except the
generated docs/cli-reference.md (it is ``--help`` output). A block's language decides what
happens to it:

- ``python``: the block runs as a script (``sys.executable script.py``) with a fresh temporary
  folder as its working directory; it must exit 0.
- ``sh``, ``bash``: the block runs as one bash script in a fresh temporary folder (so variables
  and ``export`` carry from line to line). It is split into commands: backslash continuations
  and newlines inside quotes are joined, full-line comments are dropped, and a trailing
  ``# comment`` is stripped. A comment containing ``exit N`` (``# exit 1: float bits leak``)
  sets the exit status that command must return; otherwise it must return 0.
- ``console``: the same, for the lines that start with ``$ ``; the rest is shown output, and
  each of its lines must be in what the commands printed (:func:`unshown_output`: whitespace
  collapsed, durations and lines with ``...`` or a hash not compared).
- any other language (``text``, ``toml``, ``json``, ...): shown output or a file's content, not
  executed. A block without a language fails :func:`test_every_block_runs_or_says_why_not`.

Mechanical substitutions in shell commands, nothing else: ``ldp-audit``, ``python`` and ``pip``
resolve to the running interpreter's environment (its bin folder is put first on ``PATH``), a
literal ``.venv/bin/`` is replaced by that bin folder, and an absolute ``/tmp/`` becomes the
test's temporary folder (so ``--out /tmp/r/run`` writes under pytest's ``tmp_path``), and a
path starting ``benchmarks/`` or ``scripts/`` names the repository's folder of that name. Python
blocks get the same ``PATH``; their relative paths (``runs/x``) land in the temporary folder.
That environment must be this checkout's (:func:`test_blocks_run_this_checkout`): a venv
copied from another checkout runs that checkout's code.

Markers: an HTML comment just before a fence (blank lines and other HTML comments may come
between),
``<!-- doc-test: KEY KEY="VALUE" ... -->``, invisible on the rendered page. Keys:

- ``skip reason="..."``: not executed; the reason is required (paper-scale runs, installs,
  ``make`` targets that build a venv, services such as a Flower deployment).
- ``slow``: executed only under ``pytest -m slow`` (heavier than the default suite affords).
- ``once``: run once; otherwise a block runs twice in the same folder and must return the same
  exit statuses the second time (a snippet a user re-runs must not fail the second time).
  ``once`` is for commands that create a run directory, which by design refuses to be
  overwritten.
- ``id="NAME"`` / ``after="NAME"``: this block runs in a copy of the folder the block NAME left
  behind (NAME is run first if it has not run yet: once per test session, across pytest-xdist
  workers; a ``once`` block with an id that already ran as a dependency is not run again).
- ``continue``: this python block continues the previous executable block of the page (they
  run as one script; the first block's markers apply).
- ``requires="mod1,mod2"``: skipped at run time, naming the module, where an optional
  dependency is not importable (it runs wherever the extra is installed).
- ``shown``: on a python block, the comment after each ``print(...)`` line is what it prints
  (:func:`shown_prints`: the README's ``# False True float-representation``; until session 54
  a python block was checked for its exit status only).

Measured on the shared 2-core machine (load average about 12), 2026-11-27: the default part
(18 blocks, 3 of them skipped here for lack of diffprivlib/opendp) took 55 s user + 8 s system
CPU, 104 s wall; the whole (``-m "slow or not slow"``, 26 more blocks) 955 s wall, 845 s user
+ 42 s system CPU (docs/dprl.md's commands alone 410 s wall). Since then the default part has
24 blocks: run once each as written from a copy of the repository (2026-12-07, load 4-9), they
took 64 s CPU in all, the README's six commands 22.5 s of it (this test runs most blocks twice:
not remeasured).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATED = {"docs/cli-reference.md"}
RUN_LANGS = {"python", "sh", "bash", "console"}
SHOWN_LANGS = {"text", "toml", "json", "yaml", "ini", "html", "markdown"}
KEYS = {"skip", "reason", "slow", "once", "id", "after", "continue", "requires", "shown"}
TIMEOUT = 1800  # seconds for one block (the slow ones train small models)

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:(?P<body>.*?)-->\s*$")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")
_TOKEN = re.compile(r'\s*(?P<key>[A-Za-z_-]+)(?:="(?P<value>[^"]*)")?')
_EXIT = re.compile(r"\bexit (\d+)\b")


def pages() -> list[Path]:
    """README.md, then every docs page (sorted), the generated CLI reference excluded."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md"))
    out = [ROOT / "README.md", *docs]
    return [p for p in out if p.relative_to(ROOT).as_posix() not in GENERATED]


@dataclasses.dataclass
class Block:
    page: str  # relative to ROOT
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    marker: dict[str, str | None]
    marker_error: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse_marker(text: str) -> tuple[dict[str, str | None], str | None]:
    """``' skip reason="x" slow'`` -> ({"skip": None, "reason": "x", "slow": None}, None)."""
    out: dict[str, str | None] = {}
    rest = text.strip()
    while rest:
        m = _TOKEN.match(rest)
        if not m or m.end() == 0:
            return out, f"cannot parse marker text {rest!r}"
        out[m.group("key")] = m.group("value")
        rest = rest[m.end() :].strip()
    unknown = sorted(set(out) - KEYS)
    return out, (f"unknown marker key(s) {unknown}" if unknown else None)


def parse_page(path: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of one Markdown page, with the marker just before it."""
    rel = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        lang = m.group("info").strip().split(" ")[0].lower() if m.group("info").strip() else ""
        j = i + 1
        while j < len(lines):
            c = _FENCE.match(lines[j])
            if c and c.group("fence")[0] == fence[0] and len(c.group("fence")) >= len(fence):
                if not c.group("info").strip():
                    break
            j += 1
        body = "\n".join(
            ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1 : j]
        )
        k = i - 1  # back over blank lines and other HTML comments to a doc-test marker
        marker, err = {}, None
        while k >= 0 and (not lines[k].strip() or _COMMENT.match(lines[k])):
            if mm := _MARKER.match(lines[k]):
                marker, err = parse_marker(mm.group("body"))
                break
            k -= 1
        blocks.append(Block(rel, i + 1, lang, body, marker, err))
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for p in pages() for b in parse_page(p)]


@dataclasses.dataclass
class Item:
    """What one test runs: an executable block, with the python blocks that continue it."""

    first: Block
    code: str

    @property
    def marker(self) -> dict[str, str | None]:
        return self.first.marker


def items() -> list[Item]:
    out: list[Item] = []
    for p in pages():
        last: Item | None = None
        for b in parse_page(p):
            if b.lang not in RUN_LANGS:
                continue
            if "continue" in b.marker and last is not None and last.first.lang == b.lang:
                last.code += "\n" + b.body
                continue
            last = Item(b, b.body)
            out.append(last)
    return out


# --- shell commands --------------------------------------------------------------------------


def split_commands(body: str, console: bool = False) -> list[tuple[str, int]]:
    """Logical commands of a shell block and the exit status each must return.

    Joins backslash continuations and newlines inside quotes, drops full-line comments, strips a
    trailing ``# comment`` (a ``#`` outside quotes after whitespace) and reads ``exit N`` in it.
    With ``console``, only the lines after a ``$ `` prompt (and their continuations) count.
    """
    lines = body.split("\n")
    if console:
        kept, cont = [], False
        for ln in lines:
            if ln.startswith("$ "):
                kept.append(ln[2:])
                cont = ln.rstrip().endswith("\\")
            elif cont:
                kept.append(ln)
                cont = ln.rstrip().endswith("\\")
        lines = kept
    cmds: list[tuple[str, int]] = []
    buf, comments, quote = "", [], None
    for ln in lines:
        i, code = 0, ""
        while i < len(ln):
            ch = ln[i]
            if quote:
                code += ch
                if ch == quote:
                    quote = None
                elif ch == "\\" and quote == '"' and i + 1 < len(ln):
                    code += ln[i + 1]
                    i += 1
            elif ch in "'\"":
                quote = ch
                code += ch
            elif ch == "#" and (i == 0 or ln[i - 1] in " \t"):
                comments.append(ln[i + 1 :])
                break
            else:
                code += ch
            i += 1
        if quote:
            buf += code + "\n"
            continue
        stripped = code.rstrip()
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += code
        if buf.strip():
            codes = [int(m.group(1)) for c in comments if (m := _EXIT.search(c))]
            cmds.append((buf.strip(), codes[-1] if codes else 0))
        buf, comments = "", []
    if buf.strip():
        cmds.append((buf.strip(), 0))
    return cmds


def shell_script(item: Item, tmp: Path, bindir: Path) -> str:
    """One bash script: each command, then a check of its exit status."""
    lines = ["set +e"]
    for cmd, code in split_commands(item.code, console=item.first.lang == "console"):
        # /tmp/ first: the venv itself may live under /tmp/ (a clone there), and its path must
        # not be mapped
        cmd = re.sub(r"(?<![\w.])/tmp/", f"{tmp}/", cmd)
        cmd = cmd.replace(".venv/bin/", f"{bindir}/")
        # the repository's measurement scripts, named from the repository root in the docs
        cmd = re.sub(r"(?<![\w./-])(benchmarks|scripts)/", lambda m: f"{ROOT}/{m.group(1)}/", cmd)
        shown = cmd.replace("'", "'\\''")
        lines += [
            cmd,
            f'__rc=$?; if [ "$__rc" != "{code}" ]; then echo \'doc-test: {item.first.where}: '
            f"`{shown}` exited '\"$__rc\"', documented {code}' >&2; exit 97; fi",
        ]
    return "\n".join(lines) + "\n"


def unshown_output(body: str, stdout: str, work: Path) -> list[str]:
    """The lines a ``console`` block shows as output that its commands did not print.

    Compared with whitespace runs collapsed, the test's folder read back as ``/tmp/`` and a
    duration (``0.11 s``) as any; a hash (8 or more hex digits, shortened or not: the chain head,
    the key id, which depend on the reader's ledger key) matches any hash, and an elision
    (``...``) any text. Until session 54 a line with either was not compared at all, so the
    ``budget --verify`` line of docs/guide/accountant.md could drift unseen.
    """

    def norm(text: str) -> str:
        return re.sub(r"\b\d+(\.\d+)? s\b", "N s", " ".join(text.split()))

    def pattern(line: str) -> str:
        parts = re.split(r"(\b[0-9a-f]{8,}(?:\.\.\.)?|\.\.\.)", norm(line))
        wild = {True: ".*?", False: "[0-9a-f]{8,}"}
        return "".join(wild[p == "..."] if i % 2 else re.escape(p) for i, p in enumerate(parts))

    printed = norm(stdout.replace(f"{work}/", "/tmp/"))
    shown = [ln for ln in body.split("\n") if ln.strip() and not ln.startswith("$ ")]
    return [ln for ln in shown if not re.search(pattern(ln), printed)]


def shown_prints(code: str) -> list[str]:
    """The comments after the ``print(...)`` lines of a python block (what each prints)."""
    return [m.group(1).strip() for m in re.finditer(r"(?m)^print\(.*\)[ \t]+#[ \t]*(.+)$", code)]


def environment(bindir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def foreign_scripts(bindir: Path) -> list[str]:
    """The scripts of ``bindir`` whose ``#!`` line runs an interpreter of another folder (pip
    writes ``#!/bin/sh`` and an ``exec`` line for a long path: read too)."""
    out = []
    for script in sorted(p for p in bindir.iterdir() if p.is_file()):
        with open(script, "rb") as f:
            head = f.read(400).decode("utf-8", "replace").split("\n")
        if not head[0].startswith("#!"):
            continue  # a binary (python itself, ruff)
        interp = (head[0][2:].split() or [""])[0]
        if interp == "/bin/sh" and len(head) > 1 and (m := re.search(r"exec' (\S+)", head[1])):
            interp = m.group(1)
        elif "python" not in Path(interp).name:
            continue  # a shell script (activate) or another program's
        folder = Path(interp).parent
        if not folder.is_dir() or not os.path.samefile(folder, bindir):
            out.append(f"{script.name} runs #!{interp}")
    return out


# --- the tests -------------------------------------------------------------------------------

ITEMS = items()
IDS = {b.marker["id"]: b for b in all_blocks() if b.marker.get("id")}


def test_every_block_runs_or_says_why_not() -> None:
    """Each fenced block has a language; each executable block runs (by default or under -m
    slow) or carries ``skip reason="..."``; markers are well-formed and refer to real ids."""
    blocks = all_blocks()
    problems = []
    for b in blocks:
        if b.marker_error:
            problems.append(f"{b.where}: {b.marker_error}")
        if not b.lang:
            problems.append(f"{b.where}: fenced block without a language (text, python, sh, ...)")
        elif b.lang not in RUN_LANGS | SHOWN_LANGS:
            problems.append(f"{b.where}: language {b.lang!r} is neither run nor shown output")
        if b.marker and b.lang not in RUN_LANGS:
            problems.append(f"{b.where}: doc-test marker on a {b.lang or 'bare'} block")
        if "skip" in b.marker and not (b.marker.get("reason") or "").strip():
            problems.append(f'{b.where}: skip without reason="..."')
        if "after" in b.marker and b.marker["after"] not in IDS:
            problems.append(f"{b.where}: after={b.marker['after']!r} names no block's id")
        if b.lang == "console" and not any(ln.startswith("$ ") for ln in b.body.split("\n")):
            problems.append(f"{b.where}: console block without a `$ ` command")
        if b.lang in {"sh", "bash", "console"} and "skip" not in b.marker:
            if not split_commands(b.body, console=b.lang == "console"):
                problems.append(f"{b.where}: shell block with no command")
    ids = [b.marker["id"] for b in blocks if b.marker.get("id")]
    problems += [f"id {i!r} used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    cont = {b.where for b in blocks if "continue" in b.marker}
    firsts = {it.first.where for it in ITEMS}
    problems += [f"{w}: `continue` follows no executable block" for w in sorted(cont & firsts)]
    assert not problems, "\n".join(problems)
    # the extraction itself: it must see the README's commands and snippet
    readme = [it for it in ITEMS if it.first.page == "README.md"]
    assert any("ldp-audit audit" in it.code for it in readme)
    assert any(it.first.lang == "python" for it in readme)


def test_blocks_run_this_checkout(tmp_path: Path) -> None:
    """The blocks run this checkout's code: a ``python`` block (started in a temporary folder)
    imports ``ldp_audit`` and its ``training`` and ``attacks`` parts from this repository, and
    every Python script of the environment (``ldp-audit``; ``flwr`` and ``flower-superlink``,
    which ``run_app_project`` starts from it, and the Flower processes they start; ``ray``,
    ``pip``) runs the environment's own interpreter. Session 56: in a fresh clone given a copy
    of another checkout's ``.venv`` (``cp -a``), the copied editable install and the scripts'
    ``#!`` lines still named the other checkout, so every block ran the other checkout's code
    and passed; ``pip install -e .`` through the copied ``pip`` re-pointed the other
    environment's install at the clone (make a new venv, or rewrite both)."""
    bindir = Path(sys.executable).parent
    probe = (
        "import importlib.util as u\n"
        "print(u.find_spec('ldp_audit').origin)\n"
        "for p in ('training', 'attacks'):\n"
        "    print(*u.find_spec('ldp_audit.' + p).submodule_search_locations)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=environment(bindir),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = res.stdout.split()
    assert len(seen) == 3, res.stdout
    other = [s for s in seen if not Path(s).resolve().is_relative_to(ROOT.resolve())]
    assert not other, f"the blocks' python imports another checkout: {other} (this one: {ROOT})"
    foreign = foreign_scripts(bindir)
    assert not foreign, f"scripts of {bindir} that run another environment: " + "; ".join(foreign)
    # the check itself: a copied script still names its first environment's interpreter
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_bytes(b"\x7fELF")
    (fake / "ldp-audit").write_text(f"#!{fake}/python\nimport sys\n")
    (fake / "flwr").write_text("#!/elsewhere/.venv/bin/python\nimport sys\n")
    (fake / "pip").write_text("#!/bin/sh\n'''exec' /elsewhere/bin/python \"$0\" \"$@\"\n' '''\n")
    (fake / "activate").write_text("# source this\n")
    (fake / "tool").write_text("#!/bin/bash\necho\n")
    assert foreign_scripts(fake) == [
        "flwr runs #!/elsewhere/.venv/bin/python",
        "pip runs #!/elsewhere/bin/python",
    ]


_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")


def indented_code(path: Path) -> list[int]:
    """Lines that open an indented code block (4 spaces after a blank line, outside a fence,
    a list, a table or HTML): such a block is neither run nor marked, so a command written that
    way escapes this file's checks."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, fence, prev, blank = [], "", "", False
    for i, ln in enumerate(lines):
        m = _FENCE.match(ln)
        if fence:
            if m and m.group("fence")[0] == fence[0] and len(m.group("fence")) >= len(fence):
                fence = "" if not m.group("info").strip() else fence
            prev = ln
            continue
        if m:
            fence, prev, blank = m.group("fence"), ln, False
        elif not ln.strip():
            blank = True
        else:
            if blank and ln.startswith("    ") and prev and not prev[0].isspace():
                out += [] if _LIST_ITEM.match(prev) or prev[0] in "|<" else [i + 1]
            prev, blank = ln, False
    return out


def test_no_indented_code_blocks(tmp_path: Path) -> None:
    """Every code block is fenced (with a language, a marker where it is not run): session 52
    found a command to regenerate reports/demo and a benchmark command written as indented
    blocks, outside the doc test."""
    found = [f"{p.relative_to(ROOT)}:{n}" for p in pages() for n in indented_code(p)]
    assert not found, "indented code blocks (fence them): " + ", ".join(found)
    page = tmp_path / "p.md"
    page.write_text("Text:\n\n    ldp-audit x\n\n- item\n\n    more of the item\n")
    assert indented_code(page) == [3]


_OUT = re.compile(r'(?:--out|--report-dir|-o)\s+([\w./-]+)|\bout\s*=\s*"([\w./-]+)"')


def test_no_two_pages_write_one_folder() -> None:
    """A reader who runs the pages one after another in one checkout never finds a run folder
    of another page in the way (each block runs in a fresh folder here, which hides that):
    docs/flower.md and docs/opacus.md both wrote runs/digits until session 52."""
    pages_of: dict[str, set[str]] = {}
    for it in ITEMS:
        if "skip" not in it.marker:
            for m in _OUT.finditer(it.code):
                folder = m.group(1) or m.group(2)
                if not folder.startswith("/"):
                    pages_of.setdefault(folder, set()).add(it.first.page)
    assert {f: p for f, p in pages_of.items() if len(p) > 1} == {}
    assert {"runs/digits", "runs/opacus-digits"} <= set(pages_of)  # the scan sees them


def test_split_commands() -> None:
    body = (
        "# a comment line\n"
        "ldp-audit audit --epsilon 1   # exit 1: float bits\n"
        "ldp-audit train --a 1 \\\n    --b 2  # -> x.json\n"
        "python -c \"\nprint('# not a comment')\"\n"
        "ARGS='--x 1 # kept'\n"
    )
    assert split_commands(body) == [
        ("ldp-audit audit --epsilon 1", 1),
        ("ldp-audit train --a 1      --b 2", 0),
        ("python -c \"\nprint('# not a comment')\"", 0),
        ("ARGS='--x 1 # kept'", 0),
    ]
    console = (
        "$ ldp-audit budget R \\\n  --limit 3\nledger: R/ledger.sqlite\n$ ldp-audit x  # exit 2"
    )
    assert split_commands(console, console=True) == [
        ("ldp-audit budget R    --limit 3", 0),
        ("ldp-audit x", 2),
    ]


def test_parse_marker_and_page(tmp_path: Path) -> None:
    assert parse_marker(' skip reason="hours, paper scale" ') == (
        {"skip": None, "reason": "hours, paper scale"},
        None,
    )
    assert parse_marker(" slow bogus ")[1] == "unknown marker key(s) ['bogus']"
    md = (
        'x\n<!-- doc-test: once id="a" -->\n\n```sh\nls\n```\n  ```python\n  print(1)\n  ```\n'
        "<!-- doc-test: slow -->\n<!-- another tool's anchor -->\n```bash\necho\n```\n"
        "<!-- doc-test: slow -->\ntext\n```python\npass\n```\n"
    )
    (tmp_path / "page.md").write_text(md)
    b = parse_page(tmp_path / "page.md", root=tmp_path)
    assert [(x.line, x.lang, x.body, x.marker) for x in b] == [
        (4, "sh", "ls", {"once": None, "id": "a"}),
        (7, "python", "print(1)", {}),
        (12, "bash", "echo", {"slow": None}),
        (17, "python", "pass", {}),  # a marker separated by text belongs to no block
    ]


def _params():
    out = []
    for it in ITEMS:
        marks = []
        if "skip" in it.marker:
            marks.append(pytest.mark.skip(reason=f"{it.first.where}: {it.marker.get('reason')}"))
        elif "slow" in it.marker:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(it, id=it.first.where, marks=marks))
    return out


def _run_once(item: Item, work: Path, tmp: Path) -> subprocess.CompletedProcess:
    bindir = Path(sys.executable).parent
    env = environment(bindir)
    if item.first.lang == "python":
        script = tmp / f"block-{item.first.line}.py"
        script.write_text(item.code + "\n")
        cmd = [sys.executable, str(script)]
    else:
        script = tmp / f"block-{item.first.line}.sh"
        script.write_text(shell_script(item, work, bindir))
        cmd = ["bash", str(script)]
    return subprocess.run(
        cmd, cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def program(code: str) -> str:
    """A python block's code without its comments and layout: what runs."""
    drop = {tokenize.COMMENT, tokenize.NL}  # NL: a line of no code, a break inside brackets
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code + "\n").readline))
    except (tokenize.TokenError, SyntaxError):  # not Python: the run says so, as it is
        return code
    return tokenize.untokenize((t.type, t.string) for t in toks if t.type not in drop)


def _runs(
    item: Item, work: Path, tmp: Path, twice: bool, shared: Path
) -> list[subprocess.CompletedProcess]:
    """The runs of ``item`` in ``work`` (two unless ``once``). A python block no other block
    depends on (no ``id``, no ``after``) runs once per test session per :func:`program`, across
    pytest-xdist workers: README.md and docs/index.md show one snippet with other comments
    (0.9 CPU-s a run); each block's own checks read the runs' output."""
    n = 2 if twice else 1
    if item.first.lang != "python" or "id" in item.marker or "after" in item.marker:
        return [_run_once(item, work, tmp) for _ in range(n)]
    import hashlib
    import pickle

    from filelock import FileLock

    key = hashlib.sha256(f"{n}\n{program(item.code)}".encode()).hexdigest()[:16]
    done = shared / f"doc-program-{key}.pickle"
    with FileLock(str(shared / f"doc-program-{key}.lock")):
        if not done.exists():
            done.write_bytes(pickle.dumps([_run_once(item, work, tmp) for _ in range(n)]))
        return pickle.loads(done.read_bytes())


def _execute(item: Item, tmp: Path, twice: bool, shared: Path) -> Path:
    """Run ``item`` (after the block it depends on) in ``tmp/work``; return that folder."""
    work = tmp / "work"
    after = item.marker.get("after")
    if after:
        shutil.copytree(_chain_done(after, tmp, shared), work, symlinks=True)
    else:
        work.mkdir()
    for attempt, res in enumerate(_runs(item, work, tmp, twice, shared), start=1):
        assert res.returncode == 0, (
            f"{item.first.where} ({item.first.lang}, run {attempt}) exited {res.returncode}\n"
            f"--- stdout (tail)\n{res.stdout[-3000:]}\n--- stderr (tail)\n{res.stderr[-5000:]}"
        )
        if item.first.lang == "console":  # what the page shows is what the commands print
            missing = unshown_output(item.code, res.stdout, work)
            assert not missing, f"{item.first.where}: shown but not printed: {missing}"
        if "shown" in item.marker:
            printed = " ".join(res.stdout.split())
            missing = [t for t in shown_prints(item.code) if " ".join(t.split()) not in printed]
            assert not missing, f"{item.first.where}: shown but not printed: {missing}"
    return work


def _chain_done(name: str, tmp: Path, shared: Path) -> Path:
    """The folder the block with ``id=name`` left behind, run at most once per test session:
    ``shared`` is the temporary folder every pytest-xdist worker of the session sees, and a
    worker that needs the block while another runs it waits for it (a file lock) instead of
    running it again (``after="readme-run"`` cost the README block's 35-46 s twice)."""
    from filelock import FileLock

    record = shared / f"doc-block-{name}.done"
    with FileLock(str(shared / f"doc-block-{name}.lock")):
        if not record.exists():
            dep = next(it for it in ITEMS if it.first.where == IDS[name].where)
            dep_tmp = tmp / f"dep-{name}"
            dep_tmp.mkdir()
            record.write_text(str(_execute(dep, dep_tmp, twice=False, shared=shared)))
        return Path(record.read_text())


@pytest.mark.parametrize("item", _params())
def test_documented_block_runs(item: Item, tmp_path: Path, tmp_path_factory) -> None:
    """The block exits 0 (python) or with each command's documented status (shell), twice in
    the same folder unless marked ``once``."""
    for mod in filter(None, (item.marker.get("requires") or "").split(",")):
        if importlib.util.find_spec(mod.strip()) is None:
            pytest.skip(f"{item.first.where} needs {mod.strip()} (an optional extra)")
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # popen-gwN: the session's folder is its parent
        shared = shared.parent
    name = item.marker.get("id")
    if name and "once" in item.marker:  # run here, or already (and checked) as a dependency
        assert _chain_done(name, tmp_path, shared).is_dir()
    else:
        _execute(item, tmp_path, twice="once" not in item.marker, shared=shared)


def test_shown_prints() -> None:
    code = (
        "x = 1  # not a print\nprint(a, b)   # 1.0 LaplaceEvent(epsilon=1.0)\n    print(c)  # x\n"
    )
    assert shown_prints(code) == ["1.0 LaplaceEvent(epsilon=1.0)"]  # top-level prints only
    readme = next(it for it in ITEMS if it.first.page == "README.md" and it.first.lang == "python")
    assert "shown" in readme.marker and shown_prints(readme.code) == [
        "1.0 LaplaceEvent(epsilon=1.0)", "False True float-representation"
    ]  # fmt: skip


def test_unshown_output(tmp_path: Path) -> None:
    """A console block's shown output is compared with what its commands printed (session 53:
    only the exit statuses were checked, so a page could show output the command no longer
    prints)."""
    body = (
        "$ ldp-audit budget /tmp/r/run --limit 3\n"
        "ledger: /tmp/r/run/ledger.sqlite  (300 charges, 300 agents)\n"
        "chain head: b69267b7...  (elided)\n"
        "key id 5b09f0aa00984392\n"
        "1 pair(s) searched, 0.11 s\n"
        "local         300            5  0/0              basic: 300\n"
        "verified: 300 charges, head b69267b7..., 1 sealed analysis file; root 81c85545...\n"
        "no violation found. This proves nothing: ...\n"
    )
    printed = (
        f"ledger: {tmp_path}/r/run/ledger.sqlite  (300 charges, 300 agents)\n"
        "chain head: 0123abcd4567  (elided)\nkey id ffffffffffffffff\n"
        "1 pair(s) searched, 2.40 s\nlocal 300 5 0/0 basic: 300\n"
        "verified: 300 charges, head 8b102f93e65c, 1 sealed analysis file; root 2159deef\n"
        "no violation found. This proves nothing: the rest of the sentence\n"
    )
    assert unshown_output(body, printed, tmp_path) == []
    drifted = printed.replace("300 charges", "299 charges").replace("basic: 300", "rdp: 300")
    drifted = drifted.replace("1 sealed analysis file", "2 sealed analysis files")
    drifted = drifted.replace("(elided)", "(another note)").replace("key id f", "key f")
    lines = body.split("\n")
    assert unshown_output(body, drifted, tmp_path) == [lines[i] for i in (1, 2, 3, 5, 6)]


def test_program_drops_comments_and_layout_only() -> None:
    """Two blocks that run once for both (:func:`_runs`) differ in comments and layout only."""
    a = "x = 1   # one\nprint(x)  # 1\n"
    assert program(a) == program("# a heading\nx = 1\nprint(x)    # prints 1\n")
    assert program(a) != program("x = 2\nprint(x)\n")
    assert program(a) != program("x = 1\nprint('# 1')\n")
    assert program("print(1") == "print(1"  # no Python: the code itself
    readme, index = (next(it for it in ITEMS if it.first.page == p and it.first.lang == "python")
                     for p in ("README.md", "docs/index.md"))  # fmt: skip
    assert readme.code != index.code and program(readme.code) == program(index.code)
