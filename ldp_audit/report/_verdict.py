"""The report's verdict: the one claim, what the audits and attacks say about it, and the
plain-language statements of the headline.

Part of :mod:`ldp_audit.report._model` (the whole model is built there).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from ldp_audit.report._load import RunData
from ldp_audit.report._statement import fmt_eps
from ldp_audit.report.markdown import count_noun as noun
from ldp_audit.rundir.files import json_real


def claim_section(run: RunData) -> dict[str, Any] | None:
    """The trainer's own privacy statement (metrics.json ``privacy``), if it wrote one."""
    claim = run.metrics.get("privacy")
    if not isinstance(claim, dict):
        return None
    return {k: v for k, v in claim.items() if isinstance(v, (str, int, float, bool, list))}


_fmt = partial(fmt_eps, nd=3)


def _ci(r: dict[str, Any]) -> str:
    if r["ci_low"] is None:
        return ""
    conf = r.get("confidence")
    lvl = f"{conf * 100:.0f}% " if isinstance(conf, float) else ""
    return f" ({lvl}CI {_fmt(r['ci_low'])}-{_fmt(r['ci_high'])})"


def _audit_statements(
    r: dict[str, Any], violations: list[str], verified: list[str], notes: list[str]
) -> None:
    """Sentences for one audit entry: each of its verdicts, with its consequence."""
    ex = r["exact_epsilon"]
    for v in r["verdicts"]:
        lb, claim = _fmt(v["epsilon_lower_bound"]), _fmt(v["claimed_epsilon"])
        if v["violation"]:
            msg = f"AUDIT VIOLATION ({v['kind']}): {r['mechanism']} leaks at least {lb} > claimed"
            violations.append(
                f"{msg} {claim}, read as {v['reading']}."
                + (f" {v['consequence']}" if v["consequence"] else "")
            )
        else:
            extra = ""
            if ex is not None and v["kind"] == "distribution":
                extra = f"; white-box exact epsilon {_fmt(ex)} (holds in exact arithmetic only)"
            void = ""
            c = v["claimed_epsilon"]
            if c is not None and (math.isinf(c) or c > 10.0):
                void = (
                    f", but a claim of {claim} per release is above 10 and itself gives no "
                    "protection, so finding no violation says nothing"
                )
            verified.append(
                f"Audit of {r['mechanism']}, {v['reading']} reading: empirical lower bound {lb} "
                f"<= claim {claim}{extra}: no violation found (a black-box audit cannot prove "
                f"the claim){void}."
            )
    prof = r.get("profile")
    if prof is not None:
        bad = [d for d, a in zip(prof["delta"], prof["above_claim"], strict=True) if a]
        if bad:
            violations.append(
                f"PROFILE VIOLATION: the audited privacy profile of {r['mechanism']} lies above "
                f"the claimed one at delta = {', '.join(_fmt(d) for d in bad)}."
            )
        else:
            verified.append(
                f"Audited privacy profile of {r['mechanism']}: at every one of "
                f"{len(prof['delta'])} deltas the epsilon lower bound is at or below the claim."
            )
    for w in r.get("warnings") or []:
        notes.append(f"Audit of {r['mechanism']}: {w}")


def _no_protection(claim: dict[str, Any]) -> str:
    unit = claim.get("unit") or "unit"
    return f"the claim itself gives no protection (epsilon = {_fmt(claim['epsilon'])} per {unit})"


_TEST_WORDS = {
    "noise": "the released noise is smaller than the claimed sigma C in some tensor or update",
    "independence": "the released noise is not fresh and independent: correlated across "
    "updates or coordinates, or following the data",
    "contribution": "a canary counts more or less than C: the per-sample clipping is not the "
    "claimed one",
    "sampling": "the batch sizes are not Poisson sampling at the claimed rate",
    "ledger": "updates were released without their charge, the claim changed mid-run, or the "
    "parameters or the optimizer's state changed outside a released update",
    "clipping": "the optimizer's own clipping let a per-sample gradient through above C, a "
    "clipped sum changed before its release, or its own steps, probed at finish(), released "
    "a raw gradient or noise not as claimed",
    "f-dp": "the canaries are guessed better than the claimed privacy curve allows",
}


def _one_run_statements(o: dict[str, Any], violations: list[str], verified: list[str]) -> None:
    lb, claim = _fmt(o["epsilon_lower_bound"]), _fmt(o["claimed_epsilon"])
    size = (
        noun(o["canaries"], "canary", "canaries") if isinstance(o["canaries"], int) else "canaries"
    )
    conf = o.get("confidence")
    lvl = f" at confidence {conf:g}" if isinstance(conf, float) else ""
    dec = o.get("decided_by")
    if o["violation"] and dec and dec != "steinke":
        p, lv = o.get("decided_p"), o.get("decided_level")
        how = (
            "a deterministic check"
            if not lv
            else f"p = {_fmt(p)} <= its level {_fmt(lv)}"
            if p is not None
            else f"at level {_fmt(lv)}"
        )
        why = "; ".join(o.get("decided_problems") or [])
        how += f": {why}" if why else ""
        also = [f for f in o.get("flagged_by") or [] if f != dec]
        violations.append(
            f"ONE-RUN AUDIT VIOLATION ({o['setting']}): the {dec} test rejected the claimed "
            f"DP-SGD ({_TEST_WORDS.get(dec, 'the claimed mechanism is contradicted')}; {how})"
            + (f", also flagged by {', '.join(also)}" if also else "")
            + f". The (eps, delta) lower bound of {o['name']} is {lb} against the claim {claim}"
            f"{lvl} ({size}): the run breaks the mechanism the claim assumes, whatever that "
            "bound says."
        )
        return
    if o["violation"]:
        violations.append(
            f"ONE-RUN AUDIT VIOLATION ({o['setting']}): {o['name']} leaks at least {lb} > "
            f"claimed {claim}{lvl} ({size})."
        )
        return
    ceiling = (
        f"; with {size} it could not have shown more than {_fmt(o['ceiling'])}"
        if o.get("ceiling") is not None
        else ""
    )
    verified.append(
        f"One-run audit ({o['setting']}, {size}): empirical lower bound {lb} <= claim {claim}"
        f"{lvl}: no violation found{ceiling} (an audit cannot prove the claim)."
    )


def _evidence(lc: dict[str, Any]) -> tuple[str, str]:
    """What the verdict rests on: ``"authenticated"`` (the run verified against its manifest,
    every MAC checked with this process's key), ``"unauthenticated"`` (verified, no key) or
    ``"unverified"`` (a problem: read with --allow-unverified), and the words the verdict line
    carries (empty when authenticated). ``lc``: the status section's ``ledger_check`` (always
    there: ``_model._ledger_check`` reports a check that raised as unverified, with its words)."""
    if not lc["ok"]:
        return "unverified", lc["words"]
    if not lc["authenticated"]:
        return (
            "unauthenticated",
            "UNAUTHENTICATED EVIDENCE: no ledger key checked this run's MACs, so anyone who "
            "can write the run could have written this verdict.",
        )
    return "authenticated", ""


def _fully_tested(o: dict[str, Any]) -> bool:
    """A white-box one-run audit that ran its ledger and sampling tests among others and left
    none out (``tests_not_run`` empty): the run's own attack, as complete as it gets."""
    run = set(o.get("tests_run") or [])
    return (
        "white" in str(o.get("setting"))
        and {"ledger", "sampling"} <= run
        and not o.get("tests_not_run")
    )


def report_verdict(
    model: dict[str, Any], system_claimed: list[str] | None = None
) -> dict[str, Any]:
    led, aud, att = model["ledger"], model["audits"], model["attacks"]
    run = model["run"]
    mech = run["mechanism"] or {}
    stmt = model.get("privacy_statement") or {}
    the = stmt.get("claim") or {}
    one_run = aud.get("one_run") or []
    claimed, verified, not_verified, violations = [], [], [], []  # the verdict's four lists
    if the.get("epsilon") is not None:
        alts = [
            f"{_fmt(a['epsilon'])} by {a['method']} ({a['source']})"
            for a in the.get("alternatives") or []
        ]
        alt = f" Alternatives, not the claim: {'; '.join(alts)}." if alts else ""
        claimed.append(
            f"The claim: epsilon = {_fmt(the['epsilon'])} at delta = {_fmt(the['delta'])} per "
            f"{the.get('unit') or 'unit'}, by {the.get('method') or 'an accountant not named'} "
            f"(from {the['source']}).{alt}"
        )
    eps_sub = led["epsilon_per_submission"]
    non_private = str(mech.get("name", "")).replace("_", "").lower() in ("none", "noprivacy")
    if mech.get("name") and (non_private or (eps_sub is not None and math.isinf(eps_sub))):
        claimed.append(
            f"No local privacy is claimed: the {mech['name']} mechanism releases reports without "
            "noise (epsilon = inf); the ledger records every release as non-private."
        )
    elif mech.get("name") and eps_sub is None:
        claimed.append(
            f"Releases go through the {mech['name']} mechanism (config.json gives no "
            "per-release epsilon for it; the claim above is composed by the accountant)."
        )
    elif mech.get("name"):
        claimed.append(
            f"Each report is randomised on the agent's side by the {mech['name']} mechanism at "
            f"epsilon = {_fmt(eps_sub)} per submission (delta = {_fmt(led['delta'])}); the "
            "aggregator only ever sees the noisy report."
        )
    else:
        claimed.append(
            f"The {run['algorithm']} run records its releases in the ledger; its mechanisms "
            "are described in the algorithm's sections below."
        )
    claimed.extend(system_claimed or [])  # the system's own sentences (its report sections)
    if led["agents"]:
        inf_note = ""
        if led.get("infinite_agents"):
            inf_note = (
                f" {noun(led['infinite_agents'], 'ledger id')} spent epsilon = inf under every "
                "method (non-private releases)."
            )
        if led.get("basic_not_applicable"):
            inf_note += (
                f" Basic composition does not apply to the Gaussian or approximate-DP events of "
                f"{noun(led['basic_not_applicable'], 'ledger id')} (inf under it, finite under "
                "the tightest method)."
            )
        claimed.append(
            f"Per agent, composed over its submissions: at most {_fmt(led['basic']['max'])} under "
            f"basic sequential composition and {_fmt(led['best']['max'])} under the tightest valid "
            f"method ({', '.join(led['methods'])}), over {noun(led['agents'], 'agent')} in the "
            f"ledger.{inf_note}"
        )
    claim = model.get("claim") or {}
    eps_agent = json_real(claim.get("epsilon_per_agent"))
    if eps_agent is not None:
        how = f" ({claim['composition']})" if isinstance(claim.get("composition"), str) else ""
        claimed.append(f"The trainer claims each agent's reports are {_fmt(eps_agent)}-LDP{how}.")
        top = led["basic"]["max"]
        if top is not None and top > eps_agent * (1 + 1e-9):
            violations.append(
                f"LEDGER ABOVE CLAIM: an agent spent {_fmt(top)} under basic composition, more "
                f"than the trainer's per-agent claim {_fmt(eps_agent)}."
            )
        elif top is not None:
            verified.append(
                f"The ledger agrees with the trainer's claim: no agent spent more than "
                f"{_fmt(eps_agent)} (largest: {_fmt(top)})."
            )
    if led["budget"] is not None:
        over = led["over_budget"]
        msg = f"Budget {_fmt(led['budget'])} per agent: {noun(over, 'agent')} over budget."
        (not_verified if over else claimed).append(msg)
    else:
        claimed.append("No per-agent budget was set for this run.")
    if led["central"]:
        central_max = led["central"]["max_epsilon"]
        role = ""
        if the.get("epsilon") is not None and abs(central_max - the["epsilon"]) > 1e-9 * max(
            1.0, abs(the["epsilon"])
        ):
            role = " (the ledger's tightest method: an alternative, not the claim)"
        claimed.append(
            f"Central (model-level) charges are reported separately, never summed with the local "
            f"ones: {noun(led['central']['agents'], 'ledger id')}, largest central epsilon "
            f"{_fmt(central_max)}{role}."
        )
    st = run["status"]
    if st["run"] == "not recorded":
        not_verified.append(
            "The run's status is not recorded (no status in config.json, no manifest.json): "
            "whether it finished cannot be told."
        )
    elif st["run"] != "complete":
        not_verified.append(
            f"The run did not complete (status: {st['run']}): the ledger and the outputs hold "
            "only what was released before it stopped."
        )
    if run.get("missing"):
        not_verified.append(
            f"The run lacks files it writes when it completes: {run['missing']}; the report "
            "shows the ledger and what is present."
        )
    if st["changed"] or st["missing"]:
        not_verified.append(f"EVIDENCE CHANGED: {st['evidence']}.")
    elif st["evidence_ok"]:
        verified.append(
            "Evidence intact: every file the run wrote still has the SHA-256 of its manifest."
        )
    else:
        not_verified.append(st["evidence"][0].upper() + st["evidence"][1:] + ".")
    if lc := st.get("ledger_check"):
        (verified if lc["ok"] else not_verified).append(lc["words"])
    if run.get("extra"):
        not_verified.append(
            f"Analyses read from outside the run ({', '.join(run['extra'])}) are not in the "
            "run's analyses.json: `ldp-audit report` reads them only when the toolkit sealed "
            "them for this run (an attack's --out) or with --allow-unverified."
        )
    if led.get("releases") == 0:
        not_verified.append("The run made no submissions: nothing was released or learned.")
    # a release the ledger never charged breaks the accounting every claim rests on (a budget
    # is charged before the release): a violation, as the one-run audit's ledger test reads it
    if led["uncharged_agents"]:
        violations.append(
            f"RELEASES NOT CHARGED: {noun(led['uncharged_agents'], 'agent')} submitted reports "
            f"that the ledger never charged (e.g. {', '.join(led['uncharged_examples'])}): their "
            "spend is NOT accounted."
        )
    elif led.get("releases") is not None:
        verified.append("Every agent that submitted a report was charged in the ledger.")
    if led.get("undercharged_agents"):
        violations.append(
            f"RELEASES NOT CHARGED: {noun(led['undercharged_agents'], 'agent')} released more "
            f"reports than the ledger charged (e.g. {', '.join(led['undercharged_examples'])}): "
            "part of their spend is NOT accounted."
        )
    elif led.get("charges_not_compared"):
        not_verified.append(
            "The ledger was not compared with the transcript's releases (the system's "
            f"charges could not be read: {led['charges_not_compared']})."
        )
    elif led.get("charges_compared") and not led["uncharged_agents"]:
        more = led.get("overcharged_agents") or 0
        verified.append(
            "Per agent, the ledger holds at least one charge for every release in the transcript"
            + (
                f" ({noun(more, 'agent')} charged more than released: prepaid or interrupted, the "
                f"safe side)."
                if more
                else " (the same count for every agent)."
            )
        )
    if aud["status"] == "run":
        for r in aud["results"]:
            _audit_statements(r, violations, verified, not_verified)
    for o in one_run:
        _one_run_statements(o, violations, verified)
        for test, why in (o.get("tests_not_run") or {}).items():
            not_verified.append(f"One-run audit ({o['setting']}): {test} not tested: {why}.")
    if aud["status"] != "run" and not one_run:
        not_verified.append(
            "No audit was run: neither an audit of the mechanism (audit.json) nor a one-run "
            "audit of this run."
        )
    elif aud["status"] != "run":
        not_verified.append(
            "The mechanism was not audited in isolation (no audit.json); the one-run audit "
            "(under Audits) is this run's audit."
        )
    attacks = [r for r in att["results"] if not r.get("one_run")]
    for r in attacks:
        acc, ceil = f"accuracy {_fmt(r['accuracy'])}{_ci(r)}", f"ceiling {_fmt(r['ceiling'])}"
        if r["violation"]:
            violations.append(
                f"ATTACK EXCEEDS CEILING: {r['name']} {acc} > {ceil} the claim allows."
            )
        elif r["above_chance"]:
            verified.append(
                f"Attack {r['name']}: {acc} is ABOVE CHANCE {_fmt(r['chance'])}: the attacker "
                "learns something about the secret (as any epsilon > 0 allows), and stays within "
                f"the {ceil} the claim allows."
            )
        else:
            verified.append(
                f"Attack {r['name']}: {acc} is not distinguishable from chance "
                f"{_fmt(r['chance'])} and within the {ceil} the claim allows."
            )
    if not attacks:
        not_verified.append(
            "No attack other than the one-run audit was run (no other attack_*.json)."
            if one_run
            else "No attack was run on the transcript (no attack_*.json)."
        )
    for sec in model.get("sections") or []:
        if sec.get("error"):
            not_verified.append(f"Section {sec['title']!r} could not be built: {sec['error']}")
    src = model.get("sections_source") or {}
    if src.get("entry") and src.get("reason"):  # its module is missing: said, never silent
        not_verified.append(
            f"The system's own sections ({src['entry']}) are left out: {src['reason']}."
        )
    not_verified.append(
        "Lower bounds and attacks can only find leaks, never prove their absence; the claim "
        "rests on the mechanism's proof and on every release being charged before it is made."
    )
    meaningful = bool(the.get("meaningful", True)) if the.get("epsilon") is not None else True
    if not meaningful:
        # every sentence that finds the claim upheld says, in the same sentence, that it is void
        tag = _no_protection(the)
        verified = [
            v
            if v.startswith(("Evidence intact", "Every agent", "The run matches its manifest"))
            or "gives no protection" in v
            else v.rstrip(".") + f", but {tag}."
            for v in verified
        ]
    evidence_changed = bool(st["changed"] or st["missing"])
    audited = aud["status"] == "run" or bool(one_run)
    if violations:
        status = "violation"
        label, rest = violations[0].split(":", 1)
        headline = f"{noun(len(violations), 'privacy violation')} found. {label.capitalize()}: "
        headline += rest.strip().split(". ")[0].rstrip(".") + "."
    elif not meaningful:
        status = "no meaningful guarantee"
        above = (
            "" if math.isinf(the["epsilon"]) else f" (above {stmt.get('meaningful_epsilon', 10):g})"
        )
        headline = (
            f"{_no_protection(the)[0].upper()}{_no_protection(the)[1:]}{above}; the checks "
            "below found no contradiction of it, which says nothing about privacy."
        )
    elif audited and (attacks or any(_fully_tested(o) for o in one_run)) and not evidence_changed:
        status = "consistent"
        headline = "Claims consistent with every audit and attack that was run."
    else:
        status = "partially verified"
        headline = "Claims not contradicted, but parts were not checked (see below)."
    evidence, evidence_words = _evidence(st["ledger_check"])
    return {
        "status": status,
        "headline": headline,
        "evidence": evidence,
        "evidence_words": evidence_words,
        "protection": the.get("protection"),
        "violations": violations,
        "claimed": claimed,
        "verified": verified,
        "not_verified": not_verified,
    }
