"""One small exception hierarchy for the whole toolkit.

Every error raised at a public boundary names the parameter, the constraint and the value
("epsilon must be > 0, got -1.0").
"""

from __future__ import annotations

__all__ = [
    "LdpAuditError",
    "InvalidParameterError",
    "BudgetExceeded",
    "LedgerError",
    "RunDirectoryError",
    "UserCodeError",
]


class LdpAuditError(Exception):
    """Base class of every error raised by ldp-audit."""


class InvalidParameterError(LdpAuditError, ValueError):
    """A parameter or an input array is outside what the API accepts."""


class BudgetExceeded(LdpAuditError):
    """A charge would take an agent past its privacy budget; nothing was recorded or released."""


class LedgerError(LdpAuditError):
    """The privacy ledger is corrupt, foreign, or cannot be written durably."""


class RunDirectoryError(LdpAuditError):
    """A run directory is missing files or holds malformed ones."""


class UserCodeError(InvalidParameterError):
    """A user-supplied object (a mechanism, its ``privatize``, a pairs factory, a module given as
    ``MODULE:ATTR``) failed or returned something unusable. The message names the object and
    the input; the original exception is kept as ``__cause__``."""
