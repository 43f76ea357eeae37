"""The ledger records' CRC-32 checksums, computed independently of the library (its format is
in ldp_audit.accountant.ledger_format's docstring): the tamper tests forge records with them."""

import zlib


def state_chk(agent: str, scope: str, event: str, n: int) -> int:
    """The checksum of an event-count record ``(agent, scope, event, n, chk)``."""
    return zlib.crc32(f"{len(agent)}:{agent}|{scope}|{len(event)}:{event}|{n}".encode())


def agent_chk(agent: str, n: int, last_id: int) -> int:
    """The checksum of an agent record ``(agent, n, last_id, chk, mac)``."""
    return zlib.crc32(f"{len(agent)}:{agent}|{n}|{last_id}".encode())
