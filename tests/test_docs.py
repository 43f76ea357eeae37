"""The documentation site: the generated CLI reference covers every command and option, every
page in the navigation exists, and ``mkdocs build --strict`` passes (broken links, missing pages
and unresolved API references fail it).

The build test is skipped with a message when mkdocs is not installed
(``pip install -e '.[docs]'``); it takes about 10-20 s on the shared 2-core machine.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "cli-reference.md"
STALE = "docs/cli-reference.md is stale: run `python scripts/gen_cli_docs.py` (or `make docs`)"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts/gen_cli_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _commands_and_options():
    from ldp_audit.cli import build_parser

    gen = _gen()
    out = []
    for path, parser, _ in gen.walk(build_parser()):
        opts = [
            s
            for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            for s in a.option_strings
        ]
        out.append((" ".join(("ldp-audit", *path)), opts))
    return out


def test_cli_reference_covers_every_command_and_option():
    page = CLI_PAGE.read_text()
    cmds = _commands_and_options()
    assert len(cmds) >= 10  # audit, budget, train ..., attack ..., report, demo
    for name, opts in cmds:
        assert f"`{name}`" in page, f"{name} missing; {STALE}"
        section = page.split(f"`{name}`", 1)[1]
        nxt = [section.find("\n## `"), section.find("\n### `")]
        section = section[: min([i for i in nxt if i >= 0], default=len(section))]
        for opt in opts:
            assert f"`{opt}`" in section, f"{name} {opt} missing; {STALE}"


def test_generator_covers_every_command_and_option():
    text = _gen().render()
    for name, opts in _commands_and_options():
        assert f"`{name}`" in text
        assert all(f"`{o}`" in text for o in opts)
    assert "ldp-audit attack sweep" in text and "`--backend`" in text


#: the HTML the pages write on purpose; any other <word> outside code is a placeholder that a
#: Markdown renderer passes through as an unknown tag and a browser shows as nothing
_PAGE_HTML = {"a", "b", "br", "code", "details", "div", "em", "i", "img", "kbd", "p", "span",
              "sub", "summary", "sup", "table", "td", "th", "tr"}  # fmt: skip
_TAG = re.compile(r"<([A-Za-z_][\w-]*)[^<>]*>")


def _outside_code(text: str) -> str:
    text = re.sub(r"```.*?```|<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"(`+).*?\1", "", text, flags=re.S)


def test_no_placeholder_reads_as_an_html_tag():
    """``runs/demo-<timestamp>`` in a help cell of the CLI reference, ``"<trial>/<agent>"`` in
    API docstrings and ``<unit>, by <method>`` in docs/report.md rendered as nothing (html.parser
    over the built site, 2026-12-07): every page and docstring keeps such placeholders in code."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        found += [f"{page.name}: {m[0]}" for m in _TAG.finditer(_outside_code(page.read_text()))]
    for pkg in ("ldp_audit", "training", "attacks"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                    doc = _outside_code(ast.get_docstring(node) or "")
                    found += [f"{f.name}: {m[0]}" for m in _TAG.finditer(doc)]
    assert [x for x in found if _TAG.search(x)[1].lower() not in _PAGE_HTML] == []


def test_every_documented_command_uses_options_the_cli_knows():
    """Every ``ldp-audit ...`` command the README and the docs write out (inline code joined
    across line breaks, and the lines of every fenced block) parses without an unrecognized
    option: a renamed or removed option, or one that only another subcommand takes, leaves a
    command that fails as written. Synopses and fragments (a missing required argument, a
    placeholder value) are not this test's business; ``--bogus`` in docs/cli.md is the error
    example. docs/guide/attacks.md's `ldp-audit train --epsilon` failed it (session 51)."""
    import contextlib
    import io
    import shlex

    from ldp_audit.cli import build_parser

    parser, bad, n = build_parser(), [], 0
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        raw = page.read_text()
        spans = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", raw, flags=re.S))
        blocks = re.findall(r"```[^\n]*\n(.*?)```", raw, flags=re.S)
        lines = [ln for b in blocks for ln in re.sub(r"\\\n\s*", " ", b).split("\n")]
        for cmd in [" ".join(c.split()) for c in spans + lines]:
            cmd = re.sub(r"^(\$ )?(\.venv/bin/)?ldp-audit ", "ldp-audit ", cmd)
            cmd = re.split(r"\s(?:#|\|\||&&|\||>|2>|;)\s?", cmd)[0]
            synopsis = re.search(r"[A-Z]{2,}|\.\.\.|[<>\[\]{}|]", cmd)  # COMMAND, [--x N], a|b
            if not cmd.startswith("ldp-audit ") or "--bogus" in cmd or synopsis:
                continue
            try:
                argv = shlex.split(cmd)[1:]
            except ValueError:
                continue
            err, n = io.StringIO(), n + 1
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                with contextlib.suppress(SystemExit):
                    parser.parse_known_args(argv)
            if "unrecognized arguments" in err.getvalue() or "invalid choice" in err.getvalue():
                bad.append(f"{page.relative_to(ROOT)}: {cmd}")
    assert n > 100  # the extraction sees the docs' commands
    assert [b for b in bad if "toy" not in b] == []  # docs/systems.md's plug-in example


def test_every_nav_page_exists():
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed (comes with the docs extra)")

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *a: None)
    cfg = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for x in node:
                yield from pages(x)
        elif isinstance(node, dict):
            for x in node.values():
                yield from pages(x)

    found = list(pages(cfg["nav"]))
    assert "cli-reference.md" in found and "equations.md" in found
    missing = [p for p in found if not (ROOT / "docs" / p).is_file()]
    assert not missing, f"pages in mkdocs.yml's nav but not in docs/: {missing}"


@pytest.fixture(scope="module")
def built_site(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess]:
    """``mkdocs build --strict`` once for this module (the build test and the browser test)."""
    for module, dist in (
        ("mkdocs", "mkdocs"),
        ("material", "mkdocs-material"),
        ("mkdocstrings_handlers.python", "mkdocstrings[python]"),
    ):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            pytest.skip(f"{dist} not installed: pip install -e '.[docs]'")
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        # no -q: it sets the log level to ERROR, so --strict never saw the WARNINGs it fails on
        # (a docstring griffe could not parse passed here while `make docs` failed)
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: about 7-12 s quiet, over 120 s at a load of 15
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    return site, proc


def test_strict_build(built_site):
    site, proc = built_site
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (site / "index.html").is_file()
    api = (site / "api" / "pgc-a3c.html").read_text()
    assert "ldp_audit.training.pgc_a3c" in api and "init_theta" in api  # docstrings rendered
    ref = (site / "cli-reference.html").read_text()
    assert "ldp-audit attack sweep" in ref
    pages = {p: p.read_text(errors="replace") for p in site.rglob("*.html")}
    # Sphinx roles in docstrings are rewritten into links (scripts/griffe_sphinx_roles.py): a
    # literal role (`:func:` followed by the code span or its backticks) is a rendering defect
    literal = {
        str(p.relative_to(site)): m.group(0)
        for p, text in pages.items()
        for m in [_LITERAL_ROLE.search(text)]
        if m
    }
    assert not literal, f"Sphinx roles rendered as literal text: {literal}"
    # from disk (no server) a link to a folder shows a directory listing: every internal link
    # names an .html file (use_directory_urls: false)
    folders = {
        str(p.relative_to(site)): h
        for p, text in pages.items()
        for h in _HREF.findall(text)
        if h.endswith("/") and not h.startswith(("http:", "https:", "mailto:"))
    }
    assert not folders, f"links to folders (do not navigate from disk): {folders}"
    linked = pages[site / "api" / "audit.html"]
    assert 'class="autorefs autorefs-internal"' in linked  # roles became links
    _check_offline(site, pages)
    _check_frd_api(pages[site / "api" / "frd.html"])


@pytest.mark.browser
def test_search_works_from_disk_with_no_network(built_site, tmp_path):
    """Headless Chromium opens the built site from file:// with every host name unresolvable
    and searches it (Material's ``?q=``): results come from the inlined index and the vendored
    Worker shim, nothing from another host."""
    from ldp_audit.report.browser import chromium_command, find_chromium

    site, proc = built_site
    assert proc.returncode == 0, proc.stderr[-2000:]
    binary = find_chromium()
    if binary is None:
        pytest.skip("headless Chromium is not installed (scripts/ensure_chromium.sh)")
    url = (site / "api" / "frd.html").as_uri() + "?q=FrdConfig"
    cmd = chromium_command(
        binary,
        tmp_path / "profile",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no host resolves: offline
        "--virtual-time-budget=8000",
        "--dump-dom",
        url,
    )
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'md-search-result__meta">(\d+) matching document', dom)
    assert found and int(found.group(1)) >= 1, dom[-2000:]
    assert dom.count("md-search-result__item") >= 1


#: what makes a browser load something when a page opens: <link href> (stylesheets, fonts,
#: preconnect, icons), <script src>, <img|iframe|source|video|audio|embed src>, srcset,
#: <object data>; and in CSS (files or inline) @import and url(...)
_LOADS = re.compile(
    r"<link\b[^>]*?\shref=[\"']?([^\"'\s>]+)"
    r"|<(?:script|img|iframe|source|video|audio|embed|track)\b[^>]*?\ssrc=[\"']?([^\"'\s>]+)"
    r"|\ssrcset=[\"']([^\"']+)"
    r"|<object\b[^>]*?\sdata=[\"']?([^\"'\s>]+)",
    re.I,
)
_CSS_LOADS = re.compile(r"@import\s+(?:url\()?[\"']?([^\"');\s]+)|url\(\s*[\"']?([^\"')]+)", re.I)
_OUTSIDE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)  # http://, https://, //host


def outside_loads(site: Path, pages: dict[Path, str]) -> dict[str, list[str]]:
    """Every URL on another host that a page of the built site (or a stylesheet in it) loads."""
    found: dict[str, list[str]] = {}

    def add(where: Path, url: str) -> None:
        for u in url.split(","):  # srcset: "a.png 1x, b.png 2x"
            u = u.strip().split(" ")[0]
            if _OUTSIDE.match(u):
                found.setdefault(str(where.relative_to(site)), []).append(u)

    for path, text in pages.items():
        for m in _LOADS.finditer(text):
            add(path, next(g for g in m.groups() if g))
        for m in _CSS_LOADS.finditer(text):  # <style> blocks and style="" attributes
            add(path, next(g for g in m.groups() if g))
    for css in site.rglob("*.css"):
        for m in _CSS_LOADS.finditer(css.read_text(errors="replace")):
            add(css, next(g for g in m.groups() if g))
    return found


def _check_offline(site: Path, pages: dict[Path, str]) -> None:
    """The site loads nothing from another host, and its search works from file:// (the offline
    plugin's inlined index, the vendored Worker shim)."""
    outside = outside_loads(site, pages)
    assert not outside, f"pages that load from another host: {outside}"
    index = (site / "search" / "search_index.js").read_text()
    assert index.startswith("var __index = {") and '"location":"frd.html' in index.replace(" ", "")
    assert (site / "assets" / "javascripts" / "iframe-worker-shim.js").is_file()
    shim = 'src="assets/javascripts/iframe-worker-shim.js"'
    assert shim in pages[site / "index.html"], "the file:// Worker shim is not loaded"


def _check_frd_api(page: str) -> None:
    """FRD's entry points are rendered with their docstrings on docs/api/frd.md."""
    for name in ("config.FrdConfig", "run.train", "engine.train_many", "proxy.ProxyMemoryLDP"):
        assert f'id="training.frd.{name}"' in page, f"{name} missing from api/frd.html"


def test_outside_loads_are_found(tmp_path):
    """The offline check finds each way a page can load from another host (and not a link)."""
    page = tmp_path / "p.html"
    bad = [
        '<link rel="preconnect" href="https://fonts.gstatic.com">',
        "<link href=//cdn.example/x.css rel=stylesheet>",
        '<script defer src="https://unpkg.com/iframe-worker/shim"></script>',
        '<img alt="" src="http://example.org/a.png">',
        '<img srcset="a.png 1x, https://example.org/b.png 2x">',
        "<div style=\"background: url('https://example.org/c.png')\"></div>",
        "<style>@import 'https://fonts.googleapis.com/css?family=Roboto';</style>",
    ]
    ok = [
        '<a href="https://flower.ai">Flower</a>',
        '<link rel="stylesheet" href="assets/stylesheets/main.css">',
        '<script src="../assets/javascripts/iframe-worker-shim.js"></script>',
        '<img src="data:image/png;base64,AAAA">',
    ]
    for line in ok:
        assert outside_loads(tmp_path, {page: line}) == {}, line
    for line in bad:
        assert list(outside_loads(tmp_path, {page: line})) == ["p.html"], line
    css = tmp_path / "s.css"
    css.write_text("a{background:url(img/x.svg)} b{background:url( 'https://example.org/d.svg' )}")
    assert outside_loads(tmp_path, {}) == {"s.css": ["https://example.org/d.svg"]}


_LITERAL_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):(?:<code>|`)")
_HREF = re.compile(r'<a [^>]*href="([^"#]*)(?:#[^"]*)?"')


def _public_modules() -> list[str]:
    """Every public module of the core, the trainers and the attacks (not the CLI modules, which
    the generated CLI reference covers, and not the three package roots)."""
    import ldp_audit
    import ldp_audit.attacks
    import ldp_audit.training

    out = []
    for pkg in (ldp_audit, ldp_audit.training, ldp_audit.attacks):
        for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            parts = m.name.split(".")
            if any(p.startswith("_") for p in parts) or m.name.startswith("ldp_audit.cli"):
                continue
            out.append(m.name)
    return sorted(set(out))


def test_every_public_module_has_an_api_page():
    """A public module is covered by a `::: name` directive in docs/api/ for itself or for a
    package above it (a package page renders what the package exports); the trainers' and
    attacks' folders are read statically as `training.x` / `attacks.x`."""
    documented = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        for name in re.findall(r"^:::\s*(\S+)", page.read_text(), re.M):
            if name.startswith(("training.", "attacks.")):
                name = "ldp_audit." + name
            documented.add(name)

    def covered(mod: str) -> bool:
        parts = mod.split(".")
        return any(".".join(parts[:i]) in documented for i in range(2, len(parts) + 1))

    missing = [m for m in _public_modules() if not covered(m)]
    assert not missing, f"public modules without an API page in docs/api/: {missing}"
