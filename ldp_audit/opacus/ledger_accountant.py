"""Opacus's accountant door: an Opacus accountant backed by this project's durable ledger.

Opacus 1.6 (``opacus/accountants/registry.py``) creates ``PrivacyEngine``'s accountant by name
(``create_accountant(mechanism)``: the registered ``IAccountant`` class called with no
arguments); ``register_accountant(mechanism, cls)`` adds a name. :func:`register_ledger_accountant`
registers a :class:`LedgerAccountant` bound to a ledger file, so that::

    PrivacyEngine(accountant=register_ledger_accountant("runs/mine/ledger.sqlite"))

charges every DP-SGD step to the ledger durably before the step's update is applied, and
``PrivacyEngine.get_epsilon(delta)`` reads the ledger, whether or not a ``CanaryAudit`` is
attached.

Where the charge happens (read in opacus 1.6, ``opacus/optimizers/optimizer.py``):
``make_private`` attaches ``accountant.get_optimizer_hook_fn(sample_rate)`` as the optimizer's
``step_hook``; ``DPOptimizer.pre_step`` runs ``clip_and_accumulate``, ``add_noise``,
``scale_grad`` and then ``step_hook(self)``, and ``step`` calls the wrapped optimizer's ``step``
(the only place the parameters change) only after ``pre_step`` returned. The hook calls
``accountant.step(noise_multiplier=optim.noise_multiplier, sample_rate=sample_rate *
optim.accumulated_iterations)``, so this accountant's ``step`` commits the charge (one SQLite
transaction, durable when it returns) after the noise is drawn into ``p.grad`` but before the
update is released into the model; a charge that fails (``BudgetExceeded``, ``LedgerError``)
raises out of ``optimizer.step()`` and the update is never applied. Skipped steps
(``signal_skip_step``, gradient accumulation) return before the hook and draw no noise: not
charged, as in Opacus. (``CanaryAudit`` charges earlier, before ``add_noise``; both are before
the release.)

``get_epsilon(delta)`` is the ledger's ``Accountant.spent(agent, delta=delta, method=...)``
(default ``"prv"``: Opacus's own PRV accountant on the ledger's history, equal to
``PRVAccountant`` after the same steps). ``get_noise_multiplier`` (``make_private_with_epsilon``)
creates a throw-away instance and assigns ``history`` to plan a noise level: an assigned history
is composed in memory and the ledger is not opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partialmethod
from typing import Any, ClassVar

from opacus.accountants import IAccountant, register_accountant

from ldp_audit.errors import InvalidParameterError
from ldp_audit.opacus.writer import declared_event
from ldp_audit.rundir.paths import check_path_arg
from ldp_audit.validation import check_bool, check_choice, check_int, check_real_in

__all__ = ["LedgerAccountant", "register_ledger_accountant"]

_METHODS = ("rdp", "prv", "pld", "best")


def _event(noise_multiplier: Any, sample_rate: Any) -> Any:
    s = check_real_in(noise_multiplier, "noise_multiplier", lo=0.0, lo_open=True)
    q = check_real_in(sample_rate, "sample_rate", lo=0.0, lo_open=True, hi=1.0)
    return declared_event({"noise_multiplier": s, "sample_rate": q})


class LedgerAccountant(IAccountant):
    """An Opacus ``IAccountant`` whose steps are durable ledger charges.

    Args:
        ledger: path of the ledger file (created at the first step); default: the path bound by
            :func:`register_ledger_accountant` (its class takes another as ``ledger=`` only).
        agent: the ledger agent charged (default ``"model"``, scope ``"central"``, as
            ``CanaryAudit`` and ``train dprl`` charge).
        method: the ledger's composition method ``get_epsilon`` uses (``rdp``, ``prv``, ``pld``
            or ``best``; default ``prv``, Opacus's default accountant).
        budget: an optional central budget (epsilon, or a ``Budget``) the ledger enforces: a
            step that would exceed it raises ``BudgetExceeded`` before its update is applied.
    """

    _mechanism: ClassVar[str] = "ldp_audit_ledger"

    def __init__(
        self,
        ledger: str | os.PathLike[str] | None = None,
        *,
        agent: str = "model",
        method: str = "prv",
        budget: Any = None,
    ) -> None:
        if ledger is None:
            raise InvalidParameterError(
                "ledger: no ledger path (pass LedgerAccountant(ledger=...) or register one with "
                "register_ledger_accountant(path))"
            )
        self.path = check_path_arg(ledger, "ledger")
        if not self.path.parent.is_dir():
            raise InvalidParameterError(
                f"ledger {str(self.path)!r}: folder {str(self.path.parent)!r} does not exist"
            )
        if not isinstance(agent, str) or not agent:
            raise InvalidParameterError(f"agent must be a non-empty string, got {agent!r}")
        self.agent = agent
        self.method = check_choice(method, "method", _METHODS)
        self.budget = budget
        self._acc: Any = None
        self._planned: list[tuple[float, float, int]] | None = None

    # --- Opacus's interface -------------------------------------------------------------------

    @property
    def history(self) -> list[tuple[float, float, int]]:
        """``[(noise_multiplier, sample_rate, steps)]``: the ledger's charges to ``agent`` (a
        history assigned by a planner such as ``get_noise_multiplier`` instead, if any)."""
        if self._planned is not None:
            return list(self._planned)
        from ldp_audit.accountant import GaussianEvent
        from ldp_audit.accountant.events import event_from_json, unsampled

        acc = self._accountant(create=False)
        if acc is None:
            return []
        out = []
        for ev_json, n in acc.ledger.history(self.agent):
            ev, q = unsampled(event_from_json(ev_json))
            if not isinstance(ev, GaussianEvent):  # charged by another door: not DP-SGD
                raise InvalidParameterError(
                    f"ledger {str(self.path)!r}: agent {self.agent!r} holds {ev!r}, not a "
                    f"(sampled) Gaussian step"
                )
            out.append((float(ev.noise_multiplier), float(q), int(n)))
        return out

    @history.setter
    def history(self, value: Any) -> None:
        rows = []
        for s, q, n in value:
            _event(s, q)
            rows.append((float(s), float(q), check_int(n, "history steps", minimum=1)))
        self._planned = rows

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Charge one DP-SGD step to the ledger; returns once the charge is durable.

        Raises:
            InvalidParameterError: a noise multiplier or sample rate that is not a positive
                number (nothing charged).
            BudgetExceeded / LedgerError: the step is refused; Opacus's ``optimizer.step()``
                raises it before the update is applied.
        """
        ev = _event(noise_multiplier, sample_rate)
        self._accountant().charge(self.agent, ev, scope="central")
        self._planned = None  # a real step: the ledger is the history from now on

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """Epsilon spent at ``delta``: the ledger's ``Accountant.spent`` (a planned history:
        composed in memory by the same method, the ledger untouched)."""
        from ldp_audit.accountant import compose

        if self._planned is not None:
            pairs = [(_event(s, q), n) for s, q, n in self._planned]
            return float(compose(pairs, delta=delta, method=self.method)[0]) if pairs else 0.0
        acc = self._accountant(create=False)
        if acc is None:
            return 0.0
        return float(acc.spent(self.agent, delta=delta, method=self.method))

    def __len__(self) -> int:
        """Steps charged to ``agent`` in the ledger (all processes, not only this one)."""
        return sum(n for _, _, n in self.history)

    @classmethod
    def mechanism(cls) -> str:
        return cls._mechanism

    def state_dict(self, destination: Any = None) -> Any:
        out = super().state_dict(destination)
        out["ledger"] = str(self.path)
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Check a checkpoint's accountant state against the ledger (the ledger is the truth:
        its history is never replaced by a checkpoint's)."""
        if not state_dict or state_dict.get("mechanism") != self.mechanism():
            raise InvalidParameterError(
                f"state_dict of mechanism {dict(state_dict or {}).get('mechanism')!r} cannot be "
                f"loaded into the ledger accountant {self.mechanism()!r}"
            )
        theirs = sum(int(r[2]) for r in state_dict.get("history", []))
        if theirs > len(self):
            raise InvalidParameterError(
                f"state_dict records {theirs} steps, the ledger {str(self.path)!r} only "
                f"{len(self)}: the checkpoint's steps were not charged to this ledger"
            )

    # --- the ledger ---------------------------------------------------------------------------

    def _accountant(self, create: bool = True) -> Any:
        if self._acc is None:
            if not create and not self.path.exists():
                return None
            from ldp_audit.accountant import Accountant

            self._acc = Accountant(ledger=self.path, central_budget=self.budget,
                                   run_id=f"opacus:{self.mechanism()}")  # fmt: skip
        return self._acc

    def close(self) -> None:
        """Close the ledger (a later step reopens it)."""
        if self._acc is not None:
            self._acc.close()
            self._acc = None


def register_ledger_accountant(
    ledger: str | os.PathLike[str],
    *,
    mechanism: str = "ldp_audit_ledger",
    method: str = "prv",
    agent: str = "model",
    budget: Any = None,
    force: bool = False,
) -> str:
    """Register with Opacus a :class:`LedgerAccountant` bound to ``ledger``; returns
    ``mechanism``, the name to give ``PrivacyEngine(accountant=...)``.

    Raises:
        InvalidParameterError: a bad argument, or ``mechanism`` already registered (with
            Opacus's own accountants or an earlier call) and ``force`` is False.
    """
    if not isinstance(mechanism, str) or not mechanism:
        raise InvalidParameterError(f"mechanism must be a non-empty string, got {mechanism!r}")
    force = check_bool(force, "force")
    init = partialmethod(LedgerAccountant.__init__, ledger=ledger, agent=agent, method=method,
                         budget=budget)  # fmt: skip
    cls = type("LedgerAccountant", (LedgerAccountant,), {"__init__": init, "_mechanism": mechanism})
    cls()  # checks the path, method and agent now, before Opacus holds the class
    try:
        register_accountant(mechanism, cls, force=force)
    except ValueError:
        raise InvalidParameterError(
            f"mechanism {mechanism!r} is already registered with Opacus; pass another name or "
            f"force=True"
        ) from None
    return mechanism
