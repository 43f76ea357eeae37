"""The privacy statement at the top of every report: one form for every system.

Its fields follow what published DP statements carry (TensorFlow Privacy's DP-SGD statement,
OpenDP's privacy unit, the DP deployments registry): the privacy unit, the adjacency relation,
the local or central model, what is released and to whom, the accountant and its version, the
sampling assumption and whether the code's sampling matches it, epsilon at delta (and mu-GDP
where it applies), the audit's lower bound with its confidence and size, its threat model and
the ceiling it could reach.

Every value comes from what the run recorded (``config.json``, ``metrics.json``'s privacy
statement, the ledger's charged events, ``audit.json`` and the attack/one-run artefacts) or from
the trainer's documented design (then its source says so); a value nothing records is
"not recorded", never guessed.

One epsilon is *the* claim: the accountant the run names (``config.json`` ``accountant``, else
the method whose value the trainer reported as its epsilon, else the ledger's tightest method);
every other method's value is listed as an alternative with its method. An epsilon above
:data:`MEANINGFUL_EPSILON` per unit (or infinite) gives no protection, and the report never
shows such a run as a green "consistent".
"""

from __future__ import annotations

import math
from typing import Any

from ldp_audit.report._ledger import LedgerStats
from ldp_audit.report.markdown import count_noun
from ldp_audit.rundir.files import fmt_number, json_real

STATEMENT_SCHEMA = "ldp-audit-privacy-statement/1"
#: Above this epsilon per privacy unit (or at infinity) a claim is reported as giving no
#: protection: e^10 > 22,000, so an attacker's odds on the unit's secret may grow 22,000-fold.
MEANINGFUL_EPSILON = 10.0
NOT_RECORDED = "not recorded"

#: the statement's fields in display order: key -> label
FIELDS = (
    ("privacy_unit", "Privacy unit"),
    ("adjacency", "Adjacency (neighbouring inputs)"),
    ("trust_model", "Local or central model"),
    ("released", "What is released, and to whom"),
    ("accountant", "Accountant and its version"),
    ("sampling", "Sampling assumption; does the code's sampling match it"),
    ("epsilon", "Epsilon at delta (the claim)"),
    ("alternatives", "Other accountants (alternatives, not the claim)"),
    ("mu_gdp", "mu-GDP"),
    ("protection", "What the claim protects"),
    ("audit_lower_bound", "Audit's lower bound (confidence)"),
    ("audit_size", "Canaries or samples"),
    ("threat_model", "Threat model of the audit"),
    ("audit_ceiling", "Ceiling the audit could reach"),
)

_METHOD_WORDS = {
    "basic": "basic sequential composition",
    "advanced": "advanced composition",
    "optimal": "optimal composition",
    "rdp": "Renyi DP (RDP)",
    "prv": "privacy random variables (PRV, Opacus)",
    "pld": "privacy loss distributions (PLD, dp_accounting)",
    "non_private": "non-private release (epsilon = inf)",
    "unsupported": "no method composes these events",
}


def _obj(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d[key]`` when it is a dict, else an empty one (a run's JSON is read, never trusted)."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def fmt_eps(v: float | None, nd: int = 4) -> str:
    """An epsilon for prose: ``inf``, ``1.25e+05``, ``0.5182``; ``n/a`` for None."""
    return fmt_number(v, nd, none="n/a", nan="nan")


def method_words(method: str | None) -> str:
    """A composition method's name with what it is ("prv" -> "privacy random variables ...")."""
    if not method:
        return NOT_RECORDED
    return f"{method} ({_METHOD_WORDS[method]})" if method in _METHOD_WORDS else method


# ---------------------------------------------------------------------- the claim


def versions_words(cfg: dict[str, Any]) -> str:
    """``"ldp_audit <version>"`` as config.json records it (or that it is not recorded)."""
    v = _obj(cfg, "versions")
    own = v.get("ldp_audit")
    return f"ldp_audit {own}" if own else f"ldp_audit version {NOT_RECORDED}"


def library_version(method: str | None) -> str:
    """The third-party library behind a method and its version where this report was built
    (the run does not record it)."""
    lib = {"prv": "opacus", "pld": "dp-accounting"}.get(method or "")
    if lib is None:
        return ""
    try:
        from importlib.metadata import version

        here = version(lib)
    except Exception:
        here = "not installed"
    return f"; {lib}'s version is {NOT_RECORDED} in the run ({here} where this report was built)"


def _match_method(eps: float, by_method: dict[str, float]) -> str | None:
    for m, v in by_method.items():
        if v is not None and math.isfinite(v) and abs(v - eps) <= 1e-9 * max(1.0, abs(eps)):
            return m
    return None


def _alt(method: str, epsilon: float, source: str) -> dict[str, Any]:
    """An alternative to the claim: another method's epsilon and where it comes from."""
    return {"method": method, "epsilon": epsilon, "source": source}


def the_claim(run: Any, led: LedgerStats, *, ledger_unit: str = "ledger id") -> dict[str, Any]:
    """The run's one claimed epsilon (with its unit, delta, method and source) and the
    alternatives, each with its method.

    Args:
        run: the loaded run.
        led: its ledger statistics.
        ledger_unit: the privacy unit of a claim read from the ledger's local spend (a system
            says "agent" when its ledger ids are agents; default "ledger id").

    Returns:
        ``{"epsilon", "delta", "unit", "method", "source", "per_release", "releases_per_unit",
        "alternatives": [{"method", "epsilon", "source"}], "meaningful", "protection"}``.
    """
    cfg = run.config
    inner = _obj(cfg, "config")
    mech = _obj(cfg, "mechanism")
    priv = _obj(run.metrics, "privacy")
    named = next(
        (x for d in (cfg, inner, mech) if isinstance(x := d.get("accountant"), str) and x), None
    )
    by_method = {
        str(k): n for k, v in _obj(priv, "by_method").items() if (n := json_real(v)) is not None
    }
    ledger_by = dict(led.central_by_method or {})
    out: dict[str, Any] = dict.fromkeys(("epsilon", "delta", "unit", "method"))
    alts: list[dict[str, Any]] = []
    out.update(source=NOT_RECORDED, per_release=None, releases_per_unit=None, alternatives=alts)
    if "epsilon_per_agent" in priv or "epsilon_total" in priv:  # a per-agent LDP claim
        key = "epsilon_per_agent" if "epsilon_per_agent" in priv else "epsilon_total"
        out.update(
            epsilon=json_real(priv.get(key)),
            delta=0.0,
            unit="agent",
            method="basic",
            source=f"metrics.json privacy.{key} (the trainer's claim: "
            + str(priv.get("composition") or "sequential composition of its reports")
            + ")",
            per_release=json_real(priv.get("epsilon_per_submission")),
            releases_per_unit=priv.get("rounds") if isinstance(priv.get("rounds"), int) else None,
        )
        best = float(led.best.max()) if led.best.size else None
        if best is not None and out["epsilon"] is not None and best < out["epsilon"] * (1 - 1e-9):
            meth = ", ".join(sorted(set(led.method)))
            alts.append(_alt(meth, best, "ledger, tightest valid method (largest agent)"))
    elif json_real(priv.get("epsilon")) is not None:  # a central DP claim (DP-SGD)
        eps = json_real(priv.get("epsilon"))
        method = named or _match_method(eps, by_method) or _match_method(eps, ledger_by)
        unit = priv.get("unit") or mech.get("privacy_unit")
        out.update(
            epsilon=eps,
            delta=json_real(priv.get("delta")),
            unit=str(unit) if unit else None,
            method=method,
            source="metrics.json privacy.epsilon (the trainer's accountant"
            + (f", named {named!r} in config.json)" if named else ")"),
        )
        seen = {method}
        for src, table in (("metrics.json privacy.by_method", by_method), ("ledger", ledger_by)):
            for m, v in table.items():
                if m not in seen:
                    seen.add(m)
                    alts.append(_alt(m, v, src))
    elif led.best.size or led.central:
        # no statement of its own: the ledger's largest spend is the claim
        if led.best.size:
            i = int(led.best.argmax())
            eps, method = float(led.best[i]), led.method[i]
            unit = ledger_unit
            src = "ledger: the largest spend over ids, tightest valid method"
            fin = [
                (float(v), led.method[j], led.agents[j])
                for j, v in enumerate(led.best)
                if math.isfinite(v)
            ]
            if not math.isfinite(eps) and fin:
                v, m, a = max(fin)
                alts.append(_alt(m, v, f"ledger: the largest finite spend (id {a}), not the claim"))
        else:
            agent = max(sorted(led.central), key=lambda a: led.central[a])
            eps = float(led.central[agent])
            method = _match_method(eps, ledger_by) or "best"
            unit, src = "ledger id (central)", "ledger: the largest central spend"
        out.update(epsilon=eps, delta=float(led.delta), unit=unit, method=method, source=src)
        if named:
            out["method"] = named
    eps = out["epsilon"]
    out["meaningful"] = eps is not None and math.isfinite(eps) and eps <= MEANINGFUL_EPSILON
    out["protection"] = (
        NOT_RECORDED if eps is None else "meaningful" if out["meaningful"] else "none"
    )
    return out


def protection_words(claim: dict[str, Any]) -> str:
    """One sentence on what the claim protects, naming infinite / meaningless claims."""
    eps, unit = claim["epsilon"], claim.get("unit") or "unit"
    if eps is None:
        return "No claimed epsilon is recorded, so what it protects cannot be stated."
    if math.isinf(eps):
        return (
            f"Nothing: epsilon = inf per {unit}, so the claim itself gives no protection (a "
            "release may reveal the unit's data exactly)."
        )
    if eps > MEANINGFUL_EPSILON:
        return (
            f"Nothing in practice: epsilon = {fmt_eps(eps)} per {unit} is above "
            f"{MEANINGFUL_EPSILON:g}, so the claim itself gives no protection (an attacker's odds "
            f"may grow by e^{fmt_eps(eps, 3)})."
        )
    return (
        f"epsilon = {fmt_eps(eps)} per {unit} (at most {MEANINGFUL_EPSILON:g}): an attacker's "
        f"odds on one {unit}'s data grow at most e^{fmt_eps(eps, 3)} = {math.exp(eps):.3g}-fold"
        + (f", plus probability {fmt_eps(claim['delta'])}" if claim.get("delta") else "")
        + "."
    )


# ---------------------------------------------------------------------- the audit


def _audit_fields(model: dict[str, Any]) -> dict[str, Any]:
    """Lower bound, confidence, size, threat model and ceiling of the strongest audit."""
    aud = model.get("audits") or {}
    none = "no audit was run"
    out = dict.fromkeys(("lower_bound", "confidence", "kind"))
    out.update(size=NOT_RECORDED, threat_model=none, ceiling=None, ceiling_words=none)
    out["source"] = NOT_RECORDED
    if aud.get("status") == "run" and aud.get("results"):
        pairs = [(r, v) for r in aud["results"] for v in r["verdicts"]]
        r, v = max(pairs, key=lambda rv: rv[1]["epsilon_lower_bound"])  # the first largest
        n, n_sel = r.get("samples"), r.get("selection_samples")
        split = isinstance(n, int) and isinstance(n_sel, int) and 0 < n_sel < n
        size = f"{n:,} samples per input" if isinstance(n, int) else f"samples {NOT_RECORDED}"
        size += f" ({n_sel:,} to choose the event, {n - n_sel:,} to estimate it)" if split else ""
        n_est = n - n_sel if split else r.get("estimation_samples")
        conf = r.get("confidence")
        ceiling, cw = None, NOT_RECORDED
        tail = "a larger claim cannot be refuted by this audit"
        if r.get("max_refutable_epsilon") is not None:  # recorded by the audit itself
            ceiling = float(r["max_refutable_epsilon"])
            cw = f"{fmt_eps(ceiling, 3)} (recorded by the audit): {tail}"
        elif isinstance(n_est, int) and n_est > 0 and isinstance(conf, float):
            try:
                from ldp_audit.audit import max_refutable_epsilon

                ceiling = float(max_refutable_epsilon(n_est, conf, pool=True))
                cw = (
                    f"at most {fmt_eps(ceiling, 3)} (computed from {n_est:,} estimation samples "
                    f"per input; the audit did not record it): {tail}"
                )
            except Exception:  # an auditor without the function: say so
                cw = NOT_RECORDED
        out.update(
            lower_bound=v["epsilon_lower_bound"],
            confidence=conf,
            kind=f"audit.json, {v['reading']}",
            size=size,
            threat_model=(
                "black-box audit of the mechanism in isolation: the auditor picks the input pairs "
                "(worst case over the pairs it searches) and sees every output"
                + (
                    "; the implementation reading also sees the exact floating-point bits"
                    if any(x["kind"] == "implementation" for x in r["verdicts"])
                    else ""
                )
            ),
            ceiling=ceiling,
            ceiling_words=cw,
            source=f"audit.json ({r['mechanism']})",
        )
        return out
    one = list(aud.get("one_run") or [])
    if one:
        best = max(one, key=lambda a: a["epsilon_lower_bound"] or 0.0)
        canaries = best.get("canaries")
        out.update(
            lower_bound=best["epsilon_lower_bound"],
            confidence=best.get("confidence"),
            kind=f"one-run audit ({best['setting']})",
            size=f"{canaries:,} canaries" if isinstance(canaries, int) else NOT_RECORDED,
            threat_model=best["threat_model"],
            ceiling=best.get("ceiling"),
            ceiling_words=(
                f"{fmt_eps(best['ceiling'], 3)}: the bound with every canary guessed right "
                f"({canaries:,} canaries); a larger claim cannot be refuted by this audit"
                if best.get("ceiling") is not None and isinstance(canaries, int)
                else NOT_RECORDED
            ),
            source=f"{best['name']} (one-run audit, Steinke, Nasr & Jagielski 2023)",
        )
    return out


def _decision(extra: dict[str, Any]) -> dict[str, Any]:
    """The tests a one-run audit ran (``extra["tests"]``): which flagged, which decided (its
    p-value and level), and the tests it could not run (``tests_not_run``)."""
    tests = _obj(extra, "tests")
    dec = extra.get("decided_by") if isinstance(extra.get("decided_by"), str) else None
    t = _obj(tests, dec) if dec else {}
    return {
        "tests_run": sorted(k for k, v in tests.items() if isinstance(v, dict)),
        "tests_not_run": dict(_obj(extra, "tests_not_run")),
        "flagged_by": [str(x) for x in extra.get("flagged_by") or []],
        "decided_by": dec,
        "decided_p": json_real(t.get("p_value")),
        "decided_level": json_real(t.get("level")),
        "decided_problems": [str(x) for x in t.get("problems") or []][:3],  # the witness
    }


def one_run_audit(name: str, a: dict[str, Any]) -> dict[str, Any] | None:
    """A one-run audit (an attack file whose ``attack`` starts with "one-run") as an audit row:
    setting, lower bound, confidence, canaries, threat model and ceiling."""
    kind = str(a.get("attack") or "")
    if not kind.startswith("one-run"):
        return None
    extra = _obj(a, "extra")
    setting = str(extra.get("setting") or kind.removeprefix("one-run-") or "one-run")
    f_dp = _obj(extra, "f_dp")
    return {
        "name": name,
        "attack": kind,
        "setting": setting,
        "epsilon_lower_bound": json_real(a.get("epsilon_lower_bound")) or 0.0,
        "claimed_epsilon": json_real(a.get("composed_epsilon") or a.get("epsilon")),
        "confidence": json_real(a.get("confidence")),
        "canaries": a.get("n") if isinstance(a.get("n"), int) else None,
        "correct": a.get("correct"),
        "ceiling": json_real(extra.get("steinke_ceiling")),  # the audit's own (opacus.scoring)
        "method": str(extra.get("method") or "Steinke, Nasr & Jagielski 2023"),
        "violation": a.get("violation") is True,
        "mu_claimed": json_real(f_dp.get("mu_claimed")),
        "f_dp_p": min(
            (p["p_value"] for p in f_dp.get("p_values") or [] if isinstance(p, dict)),
            default=None,
        ),
        **_decision(extra),
        "threat_model": (
            "white-box one-run audit: the auditor plants canaries and sees every model update "
            "(the gradients' sum), as a trainer-side attacker would"
            if "white" in setting
            else "black-box one-run audit: the auditor plants canaries and sees only the final "
            "model"
        ),
    }


# ---------------------------------------------------------------------- ledger events


def events_words(led: Any, scope: str) -> tuple[list[dict[str, Any]], str]:
    """The distinct events charged in one ledger scope: (rows, words such as
    "LaplaceEvent (epsilon=5) x 120"), ``not recorded`` when none."""
    rows = (led.events or {}).get(scope, []) if led is not None and led.events else []
    if not rows:
        return [], NOT_RECORDED
    parts = []
    for r in rows[:4]:
        inner = _event_args(r["event"])
        parts.append(f"{r['kind']}{f' ({inner})' if inner else ''} x {r['charges']:,}")
    more = f" and {len(rows) - 4} more kinds" if len(rows) > 4 else ""
    return rows, "; ".join(parts) + more


def _event_args(ev: Any) -> str:
    if not isinstance(ev, dict):
        return str(ev)[:60]
    keys = [k for k in ev if k not in ("type", "event")]
    inner = ev.get("event")
    s = ", ".join(f"{k}={ev[k]:.4g}" if isinstance(ev[k], float) else f"{k}={ev[k]}" for k in keys)
    if isinstance(inner, dict):
        s += (", " if s else "") + f"of {inner.get('type', '?')}({_event_args(inner)})"
    return s


def _generic_facts(run: Any, led: LedgerStats, claim: dict[str, Any]) -> dict[str, tuple[str, str]]:
    model = {
        (True, True): "local and central (separate ledger scopes, never summed)",
        (True, False): "local (per-agent charges)",
        (False, True): "central (model-level charges)",
    }.get((bool(led.agents), bool(led.central)), NOT_RECORDED)
    rows_l, ev_l = events_words(led, "local")
    rows_c, ev_c = events_words(led, "central")
    kinds = {r["kind"] for r in rows_l + rows_c}
    ev = "; ".join(x for x in (ev_l, ev_c) if x != NOT_RECORDED) or NOT_RECORDED
    return {
        "privacy_unit": ("ledger id (as the trainer named them)", "ledger.sqlite ids"),
        "adjacency": (NOT_RECORDED, "-"),
        "trust_model": (model, "ledger scopes"),
        "released": (f"what the ledger charges: {ev}", "ledger.sqlite"),
        "accountant": (
            f"{method_words(claim.get('method'))}; {versions_words(run.config)}",
            "ledger.sqlite; config.json versions",
        ),
        "sampling": (
            "Poisson subsampling is charged (PoissonSampledEvent); whether the code samples "
            f"that way is {NOT_RECORDED}"
            if "PoissonSampledEvent" in kinds
            else "none assumed (no PoissonSampledEvent charged); matches: yes, nothing to match"
            if kinds
            else NOT_RECORDED,
            "ledger events",
        ),
        "mu_gdp": (NOT_RECORDED, "-"),
    }


# ---------------------------------------------------------------------- the statement


def privacy_statement(
    run: Any,
    led: LedgerStats,
    model: dict[str, Any],
    *,
    facts: dict[str, tuple[str, str]] | None = None,
    unit: str | None = None,
) -> dict[str, Any]:
    """The privacy statement of one run (JSON-able): ``rows`` (key, label, value, source) in
    display order, ``claim`` (the one claimed epsilon and its alternatives) and ``audit``.

    Args:
        run: the loaded run (:class:`ldp_audit.report.RunData`).
        led: its :class:`ldp_audit.report.LedgerStats`.
        model: the report model built so far (``audits`` and ``attacks`` are read).
        facts: the system's rows (privacy unit, adjacency, trust model, released, accountant,
            sampling, mu-GDP) as ``key -> (value, source)``; a row it leaves out is generic.
        unit: the privacy unit of a claim read from the ledger (the system's word).
    """
    claim = the_claim(run, led, ledger_unit=unit or "ledger id")
    # the system's own rows (its report_sections, ldp_audit.report.plugin); generic otherwise
    facts = {**_generic_facts(run, led, claim), **dict(facts or {})}
    audit = _audit_fields(model)
    eps, delta, unit = claim["epsilon"], claim["delta"], claim["unit"] or "unit"
    if eps is None:
        eps_words = NOT_RECORDED
    else:
        eps_words = f"epsilon = {fmt_eps(eps)} at delta = {fmt_eps(delta)} per {unit}"
        if claim.get("per_release") is not None and claim.get("releases_per_unit"):
            eps_words += (
                f" ({fmt_eps(claim['per_release'])} per report x "
                f"{count_noun(int(claim['releases_per_unit']), 'report')})"
            )
        eps_words += f", by {method_words(claim['method'])}"
    alts = claim["alternatives"]
    alt_words = (
        "; ".join(
            f"{fmt_eps(a['epsilon'])} by {method_words(a['method'])} ({a['source']})" for a in alts
        )
        if alts
        else "none (one method gives the claim)"
    )
    lb = audit["lower_bound"]
    lb_words = (
        "no audit was run"
        if lb is None
        else f"epsilon >= {fmt_eps(lb)} at confidence {audit['confidence']} ({audit['kind']})"
    )
    facts.update(
        epsilon=(eps_words, claim["source"]),
        alternatives=(alt_words, "metrics.json privacy.by_method; ledger"),
        protection=(protection_words(claim), f"threshold {MEANINGFUL_EPSILON:g} per unit"),
        audit_lower_bound=(lb_words, audit["source"]),
        audit_size=(audit["size"], audit["source"]),
        threat_model=(audit["threat_model"], audit["source"]),
        audit_ceiling=(audit["ceiling_words"], audit["source"]),
    )
    rows = [
        {"key": k, "label": label, "value": facts[k][0], "source": facts[k][1]}
        for k, label in FIELDS
    ]
    return {
        "schema": STATEMENT_SCHEMA,
        "rows": rows,
        "fields": {r["key"]: r["value"] for r in rows},
        "claim": claim,
        "audit": audit,
        "meaningful_epsilon": MEANINGFUL_EPSILON,
    }
