"""Resuming a run without charging twice: a resumed run's charges replayed against the rows
already in a ledger.

A resumed run reruns from its seed and makes the same charges in the same order. From
``Ledger.begin_replay()`` on, each charge is compared with the ledger's next earlier row (row 1
first): equal ``(agent, event, scope)`` means it was charged before the interruption, and
nothing is written; once every earlier row has been matched, charges are written as usual. A
budget check of a batch that straddles the end sees the state before the batch (the replayed
rows taken out), as the first attempt did. Works over any store that keeps rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ldp_audit.accountant.ledger_format import AgentState, integrity_error
from ldp_audit.errors import LedgerError

__all__ = ["Replay", "before"]


class Replay:
    """The replay of ``rows`` earlier rows (state of one ``begin_replay``).

    Args:
        rows: the number of rows in the ledger when the replay began.
        read: ``(first, stop) -> [(agent, event, scope), ...]`` of rows ``first <= id < stop``.
        path: the ledger's name, for messages (a row that is not there is a
            ``LedgerIntegrityError`` naming it).
    """

    def __init__(
        self,
        rows: int,
        read: Callable[[int, int], list[tuple[str, str, str]]],
        path: str,
    ) -> None:
        self.rows = rows
        self.next = 1
        self.replayed = 0
        self._read = read
        self._path = path

    def status(self) -> dict[str, int]:
        """``{"rows", "replayed", "pending"}``."""
        return {"rows": self.rows, "replayed": self.replayed, "pending": self.rows - self.replayed}

    def match(self, rows: Sequence[tuple[str, str, str]]) -> int:
        """How many leading rows of the batch repeat the next earlier rows (changes nothing);
        those earlier rows are read in one go.

        Raises:
            LedgerError: a charge differs from the earlier row it replays.
        """
        k = min(len(rows), self.rows - self.next + 1)
        earlier = self._read(self.next, self.next + k) if k > 0 else []
        if len(earlier) < k:
            raise integrity_error(self._path, f"row {self.next + len(earlier)} is missing (resume)")
        for j, want in enumerate(earlier):
            got = (rows[j][0], rows[j][1], rows[j][2])
            if got != want:
                raise LedgerError(
                    f"ledger {self._path!r}: the resumed run does not repeat the charges of the "
                    f"run it resumes: row {self.next + j} charged {want!r}, the resumed run "
                    f"charges {got!r} (a different config, seed or code); nothing of this batch "
                    f"was charged. Start a new run instead of --resume"
                )
        return max(k, 0)


def before(
    states: dict[str, AgentState], replayed: Sequence[tuple[str, str, str]]
) -> dict[str, AgentState]:
    """``states`` with the ``replayed`` rows taken out (copies): what the first attempt's budget
    check saw."""
    out = {a: st.copy() for a, st in states.items()}
    for a, e, sc in replayed:
        st = out[a]
        st.n -= 1
        st.events[(sc, e)] -= 1
        if not st.events[(sc, e)]:
            del st.events[(sc, e)]
        if not st.n:
            del out[a]
    return out
