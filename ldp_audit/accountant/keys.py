"""The ledger's authentication key: an HMAC-SHA256 key kept outside every run directory.

Where the key comes from, first match wins (docs/accountant.md, "The key"):

1. ``LDP_AUDIT_KEY``: the key itself, as hex (at least 32 hex digits, i.e. 16 bytes).
2. ``LDP_AUDIT_KEY_FILE``: the path of a key file.
3. The per-user default key file ``$XDG_CONFIG_HOME/ldp-audit/ledger.key`` (or
   ``~/.config/ldp-audit/ledger.key`` when ``XDG_CONFIG_HOME`` is unset).

A key file holds 64 hex digits (32 random bytes) and a newline. A writer creates a missing key
file on first use (folder mode 0700, file mode 0600, never overwriting one that exists); a reader
never creates one. A key file that its group or others may read or write is refused with
:class:`KeyFileError`: a key others can read authenticates nothing.

The key's id (``key_id``) is the first 16 hex digits of SHA-256 of a fixed label and the key: it
names the key in a ledger's metadata and a run's manifest without revealing it, so a reader with
another key says "written under another key" instead of "tampered with".
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from ldp_audit.errors import InvalidParameterError, LedgerError
from ldp_audit.rundir.files import create_once

__all__ = [
    "LedgerKey",
    "KeyFileError",
    "load_key",
    "default_key_path",
    "xdg_dir",
    "key_file_path",
    "check_key_outside",
    "heads_dir",
    "check_heads_outside",
]

ENV_KEY = "LDP_AUDIT_KEY"
ENV_KEY_FILE = "LDP_AUDIT_KEY_FILE"
#: the folder of the ledgers' high-water marks (``ledger_marks``), when not the default
ENV_HEADS = "LDP_AUDIT_HEADS"
_MIN_BYTES = 16
#: the largest key file accepted (64 hex digits and a newline fit many times over); a larger
#: file is refused, never cut
MAX_KEY_FILE_BYTES = 4096


class KeyFileError(LedgerError):
    """The ledger key (file or environment variable) is unusable: unsafe permissions, bad
    contents, or it cannot be created."""


@dataclass(frozen=True)
class LedgerKey:
    """An HMAC-SHA256 key and where it came from (``source``: a path, or an env variable)."""

    key: bytes
    source: str

    def __post_init__(self) -> None:
        # RFC 2104 with the padded key's two SHA-256 states computed once: a MAC is then two
        # state copies and updates (equal to hmac.digest, tested; about 1.6x faster per call)
        k = self.key if len(self.key) <= 64 else hashlib.sha256(self.key).digest()
        k = k.ljust(64, b"\0")
        object.__setattr__(self, "_inner", hashlib.sha256(bytes(b ^ 0x36 for b in k)))
        object.__setattr__(self, "_outer", hashlib.sha256(bytes(b ^ 0x5C for b in k)))

    @property
    def id(self) -> str:
        """The key's public id: 16 hex digits, SHA-256 of a label and the key (reveals nothing
        of it)."""
        return hashlib.sha256(b"ldp-audit ledger key id v1|" + self.key).hexdigest()[:16]

    def mac(self, msg: bytes) -> bytes:
        """HMAC-SHA256 of ``msg`` under this key (32 bytes)."""
        inner = self._inner.copy()  # type: ignore[attr-defined]
        inner.update(msg)
        outer = self._outer.copy()  # type: ignore[attr-defined]
        outer.update(inner.digest())
        return outer.digest()

    def __repr__(self) -> str:  # never print the key
        return f"LedgerKey(id={self.id}, source={self.source!r})"


def xdg_dir(var: str, default: str) -> Path:
    """``$var/ldp-audit`` when ``var`` (an XDG variable) is an absolute path, else
    ``~/default/ldp-audit``."""
    base = os.environ.get(var) or ""
    root = Path(base) if base.strip() and Path(base).is_absolute() else Path.home() / default
    return root / "ldp-audit"


def default_key_path() -> Path:
    """``$XDG_CONFIG_HOME/ldp-audit/ledger.key``, else ``~/.config/ldp-audit/ledger.key``."""
    return xdg_dir("XDG_CONFIG_HOME", ".config") / "ledger.key"


_HEX = frozenset("0123456789abcdefABCDEF")


def _parse(text: str, source: str) -> bytes:
    t = text.strip()
    if any(c.isspace() for c in t):
        lines = len([ln for ln in t.splitlines() if ln.strip()])
        what = f"{lines} lines" if lines > 1 else "white space inside the key"
        raise KeyFileError(
            f"the ledger key in {source} is malformed: it holds {what}; a key is one line of "
            f"hex digits (64 for a new key), nothing else"
        )
    try:
        key = bytes.fromhex(t)
    except ValueError:
        what = "an odd number of" if len(t) % 2 and all(c in _HEX for c in t) else "not"
        raise KeyFileError(
            f"the ledger key in {source} is {what} hex digits (an even number, at least "
            f"{2 * _MIN_BYTES}: 64 for a new key; got {len(t)} characters)"
        ) from None
    if len(key) < _MIN_BYTES:
        raise KeyFileError(
            f"the ledger key in {source} is {len(key)} bytes; at least {_MIN_BYTES} bytes "
            f"({2 * _MIN_BYTES} hex digits) are needed"
        )
    return key


def _read_file(path: Path) -> bytes:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise KeyFileError(f"cannot read the ledger key file {str(path)!r}: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"the ledger key file {str(path)!r} is not a regular file")
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    if st.st_uid not in (uid, 0):  # as ssh: its owner (or root) can read or replace it
        raise KeyFileError(
            f"the ledger key file {str(path)!r} belongs to user id {st.st_uid}, not to this "
            f"process's user ({uid}) or root: its owner knows the key and can seal anything "
            f"with it, so it authenticates nothing; use a key file of your own"
        )
    if st.st_mode & 0o077:
        raise KeyFileError(
            f"the ledger key file {str(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}: its "
            f"group or others may read or change it, so it authenticates nothing; run "
            f"`chmod 600 {path}` (and make a new key if others may have read it)"
        )
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read(MAX_KEY_FILE_BYTES + 1)  # never more: a larger file is refused
        if len(text) > MAX_KEY_FILE_BYTES:
            raise KeyFileError(
                f"the ledger key file {str(path)!r} is over the limit of {MAX_KEY_FILE_BYTES} "
                f"bytes: a key file holds 64 hex digits and a newline; refusing it rather than "
                f"reading part of it"
            )
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read the ledger key file {str(path)!r}: {exc}") from None
    return _parse(text, f"file {str(path)!r}")


def _create_file(path: Path) -> None:
    """Create ``path`` with a new random key (mode 0600; never replaces an existing file)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        create_once(path, tmp, (secrets.token_hex(32) + "\n").encode(), 0o600)
    except OSError as exc:
        raise KeyFileError(f"cannot create the ledger key file {str(path)!r}: {exc}") from None


def is_inside(path: str | os.PathLike[str], folder: str | os.PathLike[str], near: bool) -> bool:
    """Whether ``path`` lies inside ``folder`` (``near``: directly in it), symlinks resolved."""
    parents = Path(os.path.realpath(path)).parents
    return Path(os.path.realpath(folder)) in (parents[:1] if near else parents)


def heads_dir() -> Path:
    """The folder of the ledgers' high-water marks (:mod:`ldp_audit.accountant.ledger_marks`):
    ``LDP_AUDIT_HEADS`` (an absolute path), else ``$XDG_STATE_HOME/ldp-audit/heads``, whatever
    the key's source. It lives here, beside the key's folder rules, so that
    :func:`check_key_outside` checks both without an import circle."""
    named = os.environ.get(ENV_HEADS)
    if named is not None and named.strip():
        if not os.path.isabs(named):  # a folder per working folder: a rollback read as no mark
            raise InvalidParameterError(
                f"{ENV_HEADS}={named!r} is not an absolute path: from each working folder it "
                f"names another folder of marks; set it to an absolute folder outside every run"
            )
        return Path(named)
    return xdg_dir("XDG_STATE_HOME", ".local/state") / "heads"  # one for every key's source


def check_heads_outside(folder: str | os.PathLike[str], what: str, near: bool = False) -> None:
    """Refuse a heads folder that is ``folder`` or inside it (``near``: only ``folder`` itself;
    symlinks resolved): copying ``folder`` back would roll the marks back with it."""
    if is_inside(heads_dir() / "mark", folder, near):
        raise LedgerError(
            f"the folder of the high-water marks {str(heads_dir())!r} is inside {what} "
            f"{str(folder)!r}: copying it back would roll the marks back with it; set "
            f"{ENV_HEADS} to an absolute folder outside every run"
        )


def key_file_path() -> Path | None:
    """The key file this process reads (or a writer creates): ``LDP_AUDIT_KEY_FILE`` or the
    default; None when ``LDP_AUDIT_KEY`` holds the key itself."""
    text = os.environ.get(ENV_KEY)
    if text is not None and text.strip():
        return None
    named = os.environ.get(ENV_KEY_FILE)
    if named is not None and named.strip() and not os.path.isabs(named):  # as ENV_HEADS
        raise KeyFileError(
            f"{ENV_KEY_FILE}={named!r} is not an absolute path: from each working folder it "
            f"names another key (a writer creates one there); set it to an absolute path"
        )
    return Path(named) if named is not None and named.strip() else default_key_path()


def check_key_outside(
    folder: str | os.PathLike[str], what: str = "the run directory", near: bool = False
) -> None:
    """Refuse a key file, or the high-water marks' folder, inside ``folder`` (a run directory;
    ``near``: a ledger's folder, where only one directly in ``folder`` is refused, so that a
    ledger in the home folder keeps the default key): a run that carries its own key
    authenticates nothing, since whoever can rewrite the run can read it.

    Raises:
        KeyFileError: the key file (existing or to be created) lies inside ``folder``.
        LedgerError: the marks' folder does (:func:`check_heads_outside`).
    """
    path = key_file_path()  # None: the key is in LDP_AUDIT_KEY itself
    if path is not None and is_inside(path, folder, near):
        raise KeyFileError(
            f"the ledger key file {str(path)!r} is inside {what} {str(folder)!r}: the run "
            f"would carry its own key, and a key beside the evidence authenticates nothing; "
            f"keep the key outside every run (set {ENV_KEY_FILE} to a file elsewhere, e.g. "
            f"the default {default_key_path()})"
        )
    check_heads_outside(folder, what, near)


def load_key(*, create: bool = False) -> LedgerKey | None:
    """The ledger key of this process (see the module docstring for where it comes from).

    Args:
        create: create the key file (``LDP_AUDIT_KEY_FILE`` or the default) when it is missing:
            writers pass True, readers False.

    Returns:
        The key, or None when there is none and ``create`` is False.

    Raises:
        KeyFileError: the key is malformed, its file is readable by others, or it cannot be
            created.
    """
    path = key_file_path()
    if path is None:
        return LedgerKey(_parse(os.environ[ENV_KEY], f"${ENV_KEY}"), f"${ENV_KEY}")
    if not path.exists():
        if not create:
            return None
        _create_file(path)
    try:
        return LedgerKey(_read_file(path), str(path))
    except KeyFileError as exc:  # name the variable that chose this file (session 54 probe)
        named = os.environ.get(ENV_KEY_FILE, "")
        if not named.strip():
            raise
        raise KeyFileError(f"{ENV_KEY_FILE}={named!r}: {exc}") from None
