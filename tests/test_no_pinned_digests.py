"""No pinned digest of float results outside the one helper that knows the machine.

A SHA-256 of float arrays from torch or BLAS is bit for bit only on the CPU family that made
it (a pinned digest made one fresh clone on another x86-64 CPU fail). A golden digest therefore
lives in a ``tests/data/*golden*.json`` file whose entries are dtype-tagged and which names the
machine that made it (``_machine``), read through :func:`tests.golden_machine.check_golden`.
This test refuses a hex digest literal (32 or more hex digits) anywhere else in the tests, and
a golden file without its machine or with an untagged entry.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

TESTS = Path(__file__).parent
#: a quoted run of 32+ hex digits: a pinned digest
HEX = re.compile(r"""['"][0-9a-fA-F]{32,}['"]""")
#: what may hold one: the helper's own docs, and published test vectors of byte-level functions
#: (an HMAC of fixed bytes, the same on every machine) named here with why
ALLOWED: dict[str, str] = {}
#: a digest anywhere in a string
HEXRUN = re.compile(r"[0-9a-fA-F]{32,}")
TAG = re.compile(r"^~?(\|O:|[<>|=][a-zA-Z]\d*:)[0-9a-f]+$|^\|O:empty$")


def test_no_pinned_hex_digest_in_test_code() -> None:
    found = []
    for f in sorted(TESTS.rglob("*.py")):
        rel = f.relative_to(TESTS).as_posix()
        if rel in ALLOWED:
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if HEX.search(line):
                found.append(f"tests/{rel}:{n}: {line.strip()[:80]}")
    assert not found, (
        "pinned digests outside tests/data/*golden*.json (use tests/golden_machine.py):\n"
        + "\n".join(found)
    )


def test_every_golden_file_names_its_machine_and_tags_its_entries() -> None:
    files = sorted((TESTS / "data").glob("*golden*.json"))
    assert files
    for f in files:
        text = f.read_text()
        if not HEXRUN.search(text):
            continue  # golden values, not digests (compared with tolerances by their test)
        doc = json.loads(text)
        assert isinstance(doc.get("_machine"), dict), f"{f.name}: no _machine"

        def leaves(d: dict, path: str) -> list[tuple[str, object]]:
            out = []
            for k, v in d.items():
                if k == "_machine":
                    continue
                out += leaves(v, f"{path}/{k}") if isinstance(v, dict) else [(f"{path}/{k}", v)]
            return out

        untagged = [(k, v) for k, v in leaves(doc, f.name)
                    if isinstance(v, str) and HEXRUN.search(v) and not TAG.match(v)]  # fmt: skip
        assert not untagged, f"{f.name}: entries without a dtype tag: {untagged[:3]}"


def test_the_check_finds_a_pinned_digest(tmp_path: Path) -> None:
    line = 'PRE = "' + "ab12" * 16 + '"'
    assert HEX.search(line) and not HEX.search('x = "' + "ab12" * 7 + '"')
    assert TAG.match("<f8:" + "0" * 32) and TAG.match("~<i8:" + "f" * 32)
    assert not TAG.match("0" * 64)
