"""The privacy-statement rows of DP-SGD RL, FedRL and FRD, given to the report through their
systems' ``report_sections`` (:mod:`ldp_audit.report.plugin`).

Each ``*_report`` function wraps the trainer's own ``report_sections`` (unchanged) and adds what
the report's privacy statement says about that system: its privacy unit, adjacency, trust model,
what it releases, its accountant, its sampling and mu-GDP. Everything else of the statement (the
claim, its alternatives, the audit's numbers) is the core report's, the same for every system.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ldp_audit.report.plugin import (
    NOT_RECORDED,
    events_words,
    fmt_eps,
    library_version,
    method_words,
    versions_words,
)
from ldp_audit.rundir.files import json_real

__all__ = [
    "dprl_report",
    "fedrl_report",
    "frd_report",
    "dprl_facts",
    "fedrl_facts",
    "frd_facts",
]


def dprl_facts(c: Any) -> dict[str, tuple[str, str]]:
    """The DP-SGD RL rows of report context ``c`` (none for an observation-noise run)."""
    run, led, claim, cfg = c.run, c.ledger, c.claim, c.run.config
    mech = cfg.get("mechanism") or {}
    if str(mech.get("name", "")).lower().replace("_", "-") != "dp-sgd":
        return {}  # observation-noise runs keep the generic rows
    priv = run.metrics.get("privacy") or {}
    # the mechanism DprlConfig.mechanism_config() writes for a DP-SGD run
    q, sigma, clip = (json_real(mech.get(k)) for k in ("sample_rate", "noise_multiplier", "clip"))
    updates = priv.get("updates") if isinstance(priv.get("updates"), int) else None
    rows, ev = events_words(led, "central")
    unit_s = str(mech["privacy_unit"]) if mech.get("privacy_unit") else NOT_RECORDED
    if any(r["kind"] == "PoissonSampledEvent" for r in rows) or (q is not None and q < 1):
        adj = (
            f"add/remove one {unit_s} (the Poisson-subsampled Gaussian's neighbouring relation, "
            f"sensitivity C = {fmt_eps(clip)})"
        )
    elif rows:
        adj = (
            f"add/remove one {unit_s}: one {unit_s} moves the clipped sum by at most C = "
            f"{fmt_eps(clip)}, the sensitivity the noise multiplier {fmt_eps(sigma)} is charged "
            "at (replacing one would need 2C)"
        )
    else:
        adj = NOT_RECORDED
    one = list(c.one_run)
    if q is None:
        samp = (NOT_RECORDED, NOT_RECORDED)
    elif q >= 1.0:
        samp = (
            f"q = 1: every {unit_s} is in every update (no sampling amplification claimed); "
            "matches: yes, no sampler is needed",
            "config.json mechanism.sample_rate; ledger events",
        )
    else:
        # the one-run audit's tests (issue 36): "sampling" (the batch sizes against Poisson
        # sampling at q, where the data set size is known) and "ledger" (every update charged
        # the declared event at this q); DQN's growing buffer leaves the first not run
        ran = next((o for o in one if {"sampling", "ledger"} & set(o.get("tests_run") or ())), None)
        flagged = set((ran or {}).get("flagged_by") or ())
        why = ((ran or {}).get("tests_not_run") or {}).get("sampling")
        if ran is not None and "sampling" in ran["tests_run"]:
            check = "the one-run audit's sampling test (batch sizes against Poisson sampling " + (
                "at q) REJECTED it" if "sampling" in flagged else "at q) did not reject it"
            )
        elif ran is not None:
            check = (
                f"the one-run audit's ledger test checked that every update was charged at "
                f"this q ({'FLAGGED' if 'ledger' in flagged else 'not flagged'}); the "
                "realised sampling was not tested" + (f" ({why})" if why else "")
            )
        else:
            check = "not checked in this run (no white-box one-run audit)"
        samp = (
            f"Poisson sampling at rate q = {fmt_eps(q)} per update (charged as "
            f"PoissonSampledEvent); the trainer draws each {unit_s} independently with "
            f"probability q; matches: {check}",
            "config.json mechanism.sample_rate; ledger events; training/dprl/algos.py; "
            "one-run audit",
        )
    mu = next((o["mu_claimed"] for o in one if o.get("mu_claimed") is not None), None)
    if mu is not None:
        mu_s = (f"mu = {fmt_eps(mu)} (Gaussian DP of the claimed mechanism)", "one-run f-DP test")
    elif q is not None and q >= 1.0 and sigma and updates:
        mu_s = (
            f"mu = sqrt(T)/sigma = {fmt_eps(math.sqrt(updates) / sigma)} over T = {updates} "
            "full-batch Gaussian updates (exact)",
            "metrics.json privacy.updates, noise_multiplier",
        )
    elif q is not None and q < 1.0:
        mu_s = ("not stated: Poisson-subsampled Gaussian has only an approximate (CLT) mu", "-")
    else:
        mu_s = (NOT_RECORDED, NOT_RECORDED)
    return {
        "privacy_unit": (unit_s, "config.json mechanism.privacy_unit"),
        "adjacency": (adj, "ledger events; config.json mechanism"),
        "trust_model": (
            "central: the trainer sees the raw data; only what leaves it (the model) is protected",
            "config.json mechanism (dp-sgd); ledger scope central",
        ),
        "released": (
            f"the model parameters after every one of {updates if updates else 'its'} update(s) "
            "(the accountant composes over all of them), to whoever receives the model",
            "metrics.json privacy.updates",
        ),
        "accountant": (
            f"{method_words(claim.get('method'))}; {versions_words(cfg)}"
            + library_version(claim.get("method"))
            + f"; charged events: {ev}",
            "metrics.json privacy; ledger.sqlite; config.json versions",
        ),
        "sampling": samp,
        "mu_gdp": mu_s,
    }


def fedrl_facts(c: Any) -> dict[str, tuple[str, str]]:
    """The FedRL rows of report context ``c``."""
    run, led = c.run, c.ledger
    mech = run.config.get("mechanism") or {}
    b, dim = json_real(mech.get("bound")), mech.get("dim")
    sens = 2 * b * math.sqrt(dim) if b is not None and isinstance(dim, int) else None
    _, ev = events_words(led, "local")
    return {
        "privacy_unit": (
            "ledger id: one agent (alpha or beta) and one channel (its Q outputs, alpha's targets "
            "Y, the test-time exchanges), e.g. 0/alpha, 0/alpha:Y",
            "ledger.sqlite ids",
        ),
        "adjacency": (
            f"replace: any two released rows of one agent (L2 sensitivity 2 B sqrt(dim) = "
            f"{fmt_eps(sens)} for clipped Q outputs; unbounded for unclipped targets)"
            if sens is not None
            else "replace: any two released rows of one agent",
            "config.json mechanism (bound, dim)",
        ),
        "trust_model": (
            "local: each agent adds noise to what it sends before it leaves it",
            "the trainer's design (training/fedrl/)",
        ),
        "released": (
            "each agent's Q outputs (and alpha's targets Y) to the other agent, in training and "
            "at test time (FedRL-1 noisy, FedRL-2 without noise)",
            "the trainer's design; ledger ids",
        ),
        "accountant": (
            f"tightest valid method per ledger id (RDP, PLD, PRV); charged events: {ev}; "
            f"{versions_words(run.config)}",
            "ledger.sqlite; config.json versions",
        ),
        "sampling": (
            "none assumed (every released row is charged); matches: yes, nothing to match",
            "ledger events (no PoissonSampledEvent)",
        ),
        "mu_gdp": (
            f"per row mu = {fmt_eps(sens / json_real(mech.get('sigma')))} (sensitivity / sigma)"
            if sens is not None and json_real(mech.get("sigma"))
            else NOT_RECORDED,
            "config.json mechanism",
        ),
    }


def frd_facts(c: Any) -> dict[str, tuple[str, str]]:
    """The FRD rows of report context ``c``."""
    run, led, claim = c.run, c.ledger, c.claim
    mech = run.config.get("mechanism") or {}
    inner = run.config.get("config") or {}
    _, ev = events_words(led, "local")
    ldp = mech.get("name") == "frd_proxy_ldp"
    released = (
        f"each agent's upload every exchange: {mech.get('samples', 'm')} randomised (cell, "
        f"action) pairs over {mech.get('n_cells', 'the')} proxy cells, to the server that "
        "averages them (and, through the global proxy memory, to every agent)"
        if ldp
        else "each agent's upload (per-cell policy averages, or its parameters under FedAvg), "
        "to the server and, through the broadcast, to every agent"
    )
    return {
        "privacy_unit": (
            "agent: all uploads of one agent (its private gravity and the states it visits)",
            "ledger ids; training/frd/",
        ),
        "adjacency": (
            "replace: any two inputs of one agent (local DP: every pair of possible uploads)"
            if ldp
            else NOT_RECORDED,
            "definition of local DP; config.json mechanism",
        ),
        "trust_model": (
            "local: each agent randomises its upload before it leaves it"
            if ldp
            else "none: uploads are released without noise",
            "config.json mechanism",
        ),
        "released": (released, "config.json mechanism; training/frd/"),
        "accountant": (
            f"{method_words(claim.get('method'))} of the ledger's charges ({ev}); "
            f"{versions_words(run.config)}",
            "ledger.sqlite; config.json versions",
        ),
        "sampling": (
            f"the m = {inner.get('ldp_samples', mech.get('samples'))} cells of an upload are "
            "drawn from the agent's own memory; the upload is charged as one release (no "
            "amplification by that sampling is claimed); matches: yes, nothing to match"
            if ldp
            else NOT_RECORDED,
            "ledger events; config.json config.ldp_samples",
        ),
        "mu_gdp": ("not applicable (pure epsilon-DP randomised response)", "mechanism")
        if ldp
        else (NOT_RECORDED, "-"),
    }


def _system_report(sections: str, facts_of: Any, unit: str | None = None) -> Any:
    """A ``report_sections`` entry: the trainer's sections (``sections``: "module:function")
    and, given a report ``context``, the rows ``facts_of(context)`` (with the claim's ``unit``
    when it is read from the ledger)."""

    def report(
        run_dir: Path, extra: list[Path] | None = None, *, context: Any = None
    ) -> dict[str, Any]:
        from ldp_audit.systems import resolve

        out: dict[str, Any] = {"sections": resolve(sections, "report sections")(run_dir, extra)}
        if context is not None:
            out["statement"] = {k: [v[0], v[1]] for k, v in facts_of(context).items()}
            if unit:
                out["statement"]["unit"] = unit
        return out

    return report


#: DP-SGD RL's sections (``ldp_audit.training.dprl.report.report_sections``) and, for a DP-SGD
#: run, its statement rows (observation-noise runs keep the generic rows)
dprl_report = _system_report("ldp_audit.training.dprl.report:report_sections", dprl_facts)
#: FedRL's sections (``ldp_audit.training.fedrl.report.report_sections``) and statement rows
fedrl_report = _system_report("ldp_audit.training.fedrl.report:report_sections", fedrl_facts)
#: FRD's sections (``ldp_audit.training.frd.run.report_sections``) and statement rows; its privacy
#: unit, when the claim is read from the ledger, is the agent
frd_report = _system_report("ldp_audit.training.frd.run:report_sections", frd_facts, "agent")
