"""The privacy statement and verdict that open every paper-reproduction report (issue 39).

Each reproduction's README (``reports/pgc-a3c``, ``pgc-a3c-sample``, ``pgc-a3c-readings``,
``dprl``, ``frd``, ``fedrl``, ``fedrl-16``) starts, right under its title, with the block
:func:`statement_lines` writes: what is released to whom (local or central DP), the privacy
unit, the mechanism with its claimed epsilon (delta) and accountant, the audit's or attack's
result with its confidence, a one-line verdict, and what reproduces bit for bit on which
machine. Every number comes from the report's ``results.json`` alone, so the block rebuilds
from the committed results without rerunning anything; what results.json does not hold is said
to be "not recorded", never guessed. The words about a system's design (who receives what) are
the trainer's, the same for every run of it.

:func:`system_of` tells which reproduction a results.json is from (by the keys it holds);
:func:`fingerprint_words` says on what machine (:func:`ldp_audit.training.reproduction.provenance`)
a rerun is bit for bit.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ldp_audit.errors import InvalidParameterError
from ldp_audit.report.markdown import wrap_markdown
from ldp_audit.rundir.files import fmt_number
from ldp_audit.training.reproduction import to_float as _f

__all__ = [
    "system_of",
    "statement_lines",
    "readme_page",
    "fingerprint_words",
    "report_folder",
]

NOT_RECORDED = "not recorded"
#: PGC-A3C's episode score crosses with each report, as in the paper (section 4, "Stopping
#: Criteria": "We assume the scores are not private information")
SCORE_WORDS = (
    "with it the episode's score zeta_n, un-noised and uncharged (the paper assumes scores are "
    "not private information; the stop rule reads them; the claim does not cover them)"
)


def system_of(res: Any) -> str:
    """Which reproduction wrote ``res`` (a results.json read as a dict), from its keys."""
    if not isinstance(res, dict):
        raise InvalidParameterError(
            f"res must be a reproduction's results.json (a dict), got {type(res).__name__}"
        )
    if "readings" in res and "settings" in res:
        return "pgc-a3c-readings"
    if "comparison" in res and "settings" in res:
        return "pgc-a3c"
    if "table1" in res:
        return "fedrl"
    if "rows" in res and "paper_claims" in res:
        return "frd"
    if "table" in res and ("audits" in res or ("runs" in res and "settings" in res)):
        return "dprl"
    raise InvalidParameterError(
        "res must be the results.json of ldp-audit reproduce pgc-a3c, dprl, frd or fedrl; got "
        f"one with keys {sorted(res)[:12]}"
    )


def _e(v: Any, nd: int = 4) -> str:
    return fmt_number(_f(v), nd, none=NOT_RECORDED)


def _eps_list(values: list[Any]) -> str:
    return ", ".join(_e(v) for v in values)


def _ratio(a: dict[str, Any], claim: str) -> float:
    """An audit's lower bound over its claim ``a[claim]`` (how close it came to a violation)."""
    return (_f(a["epsilon_lower_bound"]) or 0) / (_f(a[claim]) or 1)


def _bound(lb: Any, claim: Any, violation: bool) -> str:
    return f"bound {_e(lb, 3)} {'>' if violation else '<='} claim {_e(claim, 3)}"


def _result(audit: str, verdict: str) -> list[str]:
    """The statement's last two bullets: the audit or attack, and the verdict."""
    return [f"- **Audit / attack:** {audit}", f"- **Verdict:** {verdict}"]


_NO_AUDIT = _result("none.", "no audit in this report.")


# ---------------------------------------------------------------------- machine and reruns


def fingerprint_words(res: dict[str, Any]) -> str:
    """The machine a results.json says it was made on, in words; what it lacks is named."""
    fp = res.get("fingerprint")
    if isinstance(fp, dict):
        words = {"cpu_model": "CPU {}", "torch_cpu_capability": "torch dispatch {}",
                 "platform": "{}"}  # fmt: skip
        parts = [w.format(fp[k]) for k, w in words.items() if fp.get(k)]
        vers = fp.get("versions") or {}
        parts += [f"{k} {v}" for k, v in sorted(vers.items())]
        return "the machine fingerprint results.json records: " + ", ".join(parts)
    machine = res.get("machine")
    vers = res.get("versions") if isinstance(res.get("versions"), dict) else {}
    words = f"`{machine}`" if machine else "machine not recorded"
    words += (
        " with " + ", ".join(f"{k} {v}" for k, v in vers.items())
        if vers
        else "; library versions not recorded"
    )
    return words + "; no CPU model or instruction-set fingerprint recorded in results.json"


_RERUN = {
    "pgc-a3c": "the fused NumPy/Numba engine draws every noise value from seeded generators "
    "and its results do not depend on the worker count",
    "pgc-a3c-readings": "the fused NumPy/Numba engine and the audits draw from seeded "
    "generators; results do not depend on the worker count",
    "dprl": "every run is seeded; torch on the CPU",
    "frd": "every group is seeded",
    "fedrl": "every (method, run) task is seeded; torch on the CPU with `--threads` per worker",
}


def _rerun_line(system: str, res: dict[str, Any], folder: str) -> str:
    return (
        f"- **Reproduces:** bit for bit only with the same command and seed on the same CPU "
        f"family and library versions ({_RERUN[system]}). Made on {fingerprint_words(res)}. On "
        "another CPU, torch or BLAS the float arithmetic may round differently and a "
        "trajectory may turn another way, so per-run numbers can differ: compare a rerun's cells "
        f"with the committed intervals with `ldp-audit reproduce check RERUN_FOLDER {folder}`."
    )


# ---------------------------------------------------------------------- per system


def _pgc(res: dict[str, Any]) -> list[str]:
    cfg = res.get("config") or {}
    st = res.get("settings") or {}
    mechs = cfg.get("mechanisms") or sorted({e.get("mechanism") for e in st.values()})
    eps = [e for e in cfg.get("epsilons", []) if _f(e) is not None and not math.isinf(_f(e))]
    buffers = {
        m: sorted({e.get("buffer_size") for e in st.values() if e.get("mechanism") == m})
        for m in mechs
    }
    mech = "; ".join(f"{m} (|B| = {', '.join(str(b) for b in buffers[m])})" for m in mechs)
    return [
        "- **Released, to whom (local DP):** each agent's clipped, noised gradient report, to "
        f"the untrusted aggregator that updates the shared policy; {SCORE_WORDS}.",
        "- **Privacy unit:** the agent's input to one report (its gradient); composition over "
        "an agent's reports is not recorded in this results.json.",
        f"- **Mechanism and claim:** {mech} at epsilon = {_eps_list(eps)} per report, pure "
        "epsilon-LDP (delta = 0), plus the non-private epsilon = inf baseline; accountant: "
        "none (one pure-DP release per report, no composition claimed).",
        *_result(
            "none in this report (it measures learning; the mechanisms' claims are audited in "
            "`reports/pgc-a3c-readings`).",
            "no audit in this report.",
        ),
    ]


def _claim(label: str) -> str:
    """A readings audit's claim label as words: "claimed (the paper)" -> "the paper's claim",
    "true (112 x epsilon)" -> "the true claim (112 x epsilon)"."""
    kind, _, whose = label.partition(" (")
    whose = whose.rstrip(")")
    if not whose:
        return f"the {kind} claim"
    return f"{whose}'s claim" if kind == "claimed" else f"the {kind} claim ({whose})"


def _readings(res: dict[str, Any]) -> list[str]:
    cfg = res.get("config") or {}
    st = res.get("settings") or {}
    priv = next((e["privacy"] for e in st.values() if isinstance(e.get("privacy"), dict)), {})
    audits = res.get("audits") or []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for a in audits:
        groups.setdefault((a.get("clip_kind", "?"), a.get("claim", "?")), []).append(a)
    conf = next((a.get("confidence") for a in audits if a.get("confidence")), None)
    ratios = {  # true epsilon per claimed epsilon of each clip, as the audits record it
        a.get("clip_kind", "?"): _f(a["true_epsilon"]) / _f(a["epsilon"])
        for a in audits
        if _f(a.get("true_epsilon")) and _f(a.get("epsilon"))
    }
    lines = [
        "- **Released, to whom (local DP):** each agent's clipped, noised gradient report, to "
        f"the untrusted aggregator (Adam or SGD there is post-processing); {SCORE_WORDS}.",
        f"- **Privacy unit:** one agent (its gravity); {priv.get('rounds', NOT_RECORDED)} "
        f"report(s) per agent, composed by {priv.get('composition', NOT_RECORDED)}.",
        f"- **Mechanism and claim:** {priv.get('mechanism', NOT_RECORDED)} at epsilon = "
        f"{_eps_list(cfg.get('audit_epsilons') or [])} per agent (pure epsilon-LDP, "
        "delta = 0), the paper's claim, under every reading"
        + "".join(
            f"; the {k} clip's true epsilon is {r:g} x that" for k, r in ratios.items() if r != 1
        )
        + ".",
    ]
    if not audits:
        return lines + _NO_AUDIT
    samples = next((a.get("samples") for a in audits if a.get("samples")), None)
    parts, verdicts = [], []
    for (clip, claim), rows in groups.items():
        bad = [a for a in rows if a.get("violation")]
        worst = max(bad or rows, key=lambda a: _ratio(a, "claimed_epsilon"))
        readings = [r for r in rows[0].get("readings") or [] if r != clip]
        shown = f" ({', '.join(readings)})" if readings else ""
        what = f"{clip} clip{shown} against {_claim(claim)}"
        bound = _bound(worst["epsilon_lower_bound"], worst["claimed_epsilon"], bool(bad))
        verdicts.append(f"{what}: {'VIOLATION' if bad else 'no violation found'}")
        parts.append(
            f"{what}: VIOLATION at epsilon {_eps_list([a['epsilon'] for a in bad])} (e.g. {bound})"
            if bad
            else f"{what}: no violation found at every epsilon (closest: {bound})"
        )
    conf_s = f"{100 * conf:g}%" if conf else "confidence not recorded"
    return lines + _result(
        f"black-box audit of each reading's report mechanism ({samples or NOT_RECORDED} samples "
        f"per input, {conf_s} each): " + "; ".join(parts) + ".",
        f"audit at {conf_s}: " + "; ".join(verdicts) + ".",
    )


def _dprl(res: dict[str, Any]) -> list[str]:
    s = res.get("settings") or {}
    rows = [r for r in res.get("table") or [] if r.get("family") == "dpsgd"]
    noisy = [r for r in rows if (_f(r.get("sigma")) or 0) > 0 and not r.get("clip_only")]
    claim = "; ".join(
        f"{algo}: "
        + ", ".join(
            f"sigma {r['sigma']:g}: {_e(r.get('epsilon'))} ({r.get('epsilon_method')})"
            for r in noisy
            if r["algo"] == algo
        )
        for algo in dict.fromkeys(r["algo"] for r in noisy)
    )
    lines = [
        "- **Released, to whom (central DP):** the model parameters after every update, to "
        "whoever receives the model; the trainer itself sees the raw episodes (observation-"
        "noise rows instead perturb the states the agent sees, and claim nothing on raw "
        "states).",
        "- **Privacy unit:** one episode (REINFORCE), one transition (DQN, Poisson-sampled "
        "from the replay buffer).",
        f"- **Mechanism and claim:** DP-SGD (clip C = {_e(s.get('clip'))}), epsilon per run at "
        f"delta = {_e(s.get('delta'))}, composed over all its updates by the tightest "
        f"accountant (method named): {claim or NOT_RECORDED}; sigma 0 and clip-only: epsilon "
        "= inf.",
    ]
    audits = res.get("audits") or []
    if not audits:
        return lines + _NO_AUDIT
    correct = [a for a in audits if str(a.get("trainer", "")).startswith("correct")]
    planted = [a for a in audits if a not in correct]

    def flagged(a: dict[str, Any]) -> bool:
        return any((a.get(k) or {}).get("violation") for k in ("white-box", "black-box"))

    wrong = [a for a in correct if flagged(a)]
    caught = [a for a in planted if flagged(a)]
    tests = [a.get(k) or {} for a in audits for k in ("white-box", "black-box")]
    conf = sorted({t.get("confidence_each") for t in tests} - {None})
    # each test's level is 0.05 / (number of tests): 95% per audit by Bonferroni
    bonferroni = bool(conf) and all(
        abs(0.05 / (1 - c) - round(0.05 / (1 - c))) < 1e-6 for c in conf if c < 1
    )
    worst = max(correct, key=lambda a: _ratio(a["white-box"], "accountant_epsilon"), default=None)
    w = worst["white-box"] if worst else {}
    closest = _bound(w["epsilon_lower_bound"], w["accountant_epsilon"], False) if worst else ""
    conf_s = (
        f"each test at confidence {' or '.join(f'{c:.4g}' for c in conf)}"
        + (", 95% per audit by Bonferroni" if bonferroni else "")
        if conf
        else "confidence not recorded"
    )
    verdict = (
        f"audit: no violation found for the correct trainers at "
        f"{'95%' if bonferroni else 'the confidence above'} ({closest})"
        if not wrong
        else f"audit: VIOLATION in {len(wrong)} run(s) of the correct trainers"
    )
    return lines + _result(
        f"one-run canary audits (white-box and black-box, "
        f"{s.get('audit_canaries', NOT_RECORDED)} canaries, {conf_s}) of small audit runs "
        f"(not the table's runs): {len(correct)} runs of the correct trainers, "
        f"{len(wrong)} flagged (closest: {closest}); {len(caught)} of {len(planted)} runs with "
        "a planted bug flagged.",
        f"{verdict}; the audit caught {len(caught)}/{len(planted)} planted bugs.",
    )


def _frd(res: dict[str, Any]) -> list[str]:
    s = res.get("settings") or {}
    lines = [
        "- **Released, to whom (local DP for FRD-LDP):** each agent's upload every exchange "
        "(per-cell policy averages; FedAvg: its parameters; FRD-LDP: randomised (cell, action) "
        "pairs), to the server and, through the broadcast, to every agent.",
        "- **Privacy unit:** one agent (its private gravity and the states it visits).",
        f"- **Mechanism and claim:** FRD and FedAvg release without noise (epsilon = inf); "
        f"FRD-LDP's randomised response claims epsilon = {_eps_list(s.get('ldp_epsilons') or [])} "
        "per upload (pure epsilon-LDP, delta = 0), composed over an agent's T uploads by basic "
        "composition (T x epsilon).",
    ]
    leak = res.get("leak") or []
    if not leak:
        return lines + _result("none.", "no attack in this report.")
    bad = [r for r in leak if r.get("violation")]
    eps_up = list(
        {_e(r.get("epsilon_per_upload")): r.get("epsilon_per_upload") for r in leak}.values()
    )
    best = max(leak, key=lambda r: (_f(r.get("accuracy")) or 0) - (_f(r.get("chance")) or 0))
    lo, hi = best["accuracy_ci"]
    verdict = (
        "attack: no violation found at 95% (no accuracy interval above its ceiling)"
        if not bad
        else f"attack: VIOLATION in {len(bad)} run(s) (accuracy above the ceiling)"
    )
    return lines + _result(
        f"dynamics-inference attack on each agent's gravity, "
        f"{len(leak)} runs (eps per upload {_eps_list(sorted(eps_up, key=_f))}), "
        "95% Clopper-Pearson intervals against the ceiling the composed epsilon allows: "
        f"{len(bad)} above its ceiling; highest accuracy over chance: {best['run']} "
        f"{_e(best['accuracy'], 3)} [{_e(lo, 3)}, {_e(hi, 3)}] (chance {_e(best['chance'], 3)},"
        f" ceiling {_e(best['ceiling'], 3)}).",
        f"{verdict}.",
    )


def _fedrl(res: dict[str, Any]) -> list[str]:
    lines = [
        "- **Released, to whom (local DP):** each agent's Q outputs (and alpha's targets Y) to "
        "the other agent, in training and at test time; FedRL-1 adds Gaussian noise before "
        "they leave the agent, FedRL-2 none.",
        "- **Privacy unit:** one agent's released row (its Q outputs, a 16-vector for beta).",
    ]
    attacks, audit = res.get("attacks") or [], res.get("audit") or []
    cfg = res.get("config") or {}
    claims = ", ".join(
        f"sigma {a['sigma']:g}: {_e(a['epsilon_per_row'])}"
        for a in attacks
        if a.get("sigma") and a.get("clip_outputs")
    )
    lines.append(
        "- **Mechanism and claim:** Gaussian on the clipped outputs (clip B = "
        f"{_e(cfg.get('attack_clip'))}); the Table 1 runs' epsilon is not recorded in "
        "results.json"
        + (
            f"; per row at delta = {_e(attacks[0].get('delta'))} (Gaussian mechanism, "
            f"sensitivity 2 B sqrt(16)) in the attack sweep with clipped outputs: {claims} "
            "(unclipped outputs and sigma 0: inf)"
            if claims
            else ""
        )
        + "."
    )
    if not attacks and not audit:
        return lines + _result("none in this report (Table 1 only).", "no audit in this report.")
    parts, verdict = [], []
    if attacks:
        over = sum(bool(a.get("violation")) for a in attacks)
        conf = attacks[0].get("confidence")
        sigmas = ", ".join(dict.fromkeys(f"{a['sigma']:g}" for a in attacks))
        parts.append(
            f"transcript attack at sigma {sigmas}, clipped and not "
            f"({100 * conf:g}% Clopper-Pearson, Bonferroni over cells): {over} above its "
            "ceiling"
            if conf
            else f"transcript attack: {over} above its ceiling"
        )
        verdict.append(
            "attack: no accuracy above its ceiling" if not over else f"attack: {over} VIOLATION"
        )
    if audit:
        correct = [a for a in audit if str(a.get("mechanism", "")).startswith("correct")]
        broken = [a for a in audit if a not in correct]
        conf = next(
            (m.group(1) for a in audit
             if (m := re.search(r"at confidence ([0-9.]+)", a.get("summary", "")))), None,
        )  # fmt: skip
        conf_s = f"{100 * float(conf):g}%" if conf else "confidence not recorded"
        words = [
            f"{a['mechanism']}: {_bound(a['epsilon_lower_bound'], a['claimed_epsilon'], a['violation'])}"  # noqa: E501
            for a in audit
        ]
        parts.append(
            f"black-box audit ({audit[0].get('samples', NOT_RECORDED)} samples per input, "
            f"{conf_s}): " + "; ".join(words)
        )
        wrong = [a for a in correct if a.get("violation")]
        caught = [a for a in broken if a.get("violation")]
        verdict.append(
            (
                f"audit: no violation found at {conf_s} for the correct mechanism"
                if not wrong
                else f"audit: VIOLATION of the correct mechanism at {conf_s}"
            )
            + f"; {len(caught)}/{len(broken)} planted bugs caught"
        )
    return lines + _result("; ".join(parts) + ".", "; ".join(verdict) + ".")


def report_folder(res: dict[str, Any]) -> str:
    """The folder a report is committed in, as a rerun command names it: the ``--out`` of its
    recorded command (an absolute, machine-specific one as ``reports/<its last part>``), else
    the system's folder (``reports/pgc-a3c-sample`` for the sampled-acting ablation)."""
    system = system_of(res)
    m = re.search(r"--out[ =](\S+)", str(res.get("command") or ""))
    if m:
        out = m.group(1).rstrip("/")
        return f"reports/{out.rsplit('/', 1)[-1]}" if out.startswith("/") else out
    if system == "pgc-a3c" and (res.get("config") or {}).get("acting") == "sample":
        return "reports/pgc-a3c-sample"
    return f"reports/{system}"


_BUILDERS = {
    "pgc-a3c": _pgc,
    "pgc-a3c-readings": _readings,
    "dprl": _dprl,
    "frd": _frd,
    "fedrl": _fedrl,
}


def statement_lines(res: dict[str, Any], folder: str | None = None) -> list[str]:
    """The block under a reproduction README's title: privacy statement, verdict and what
    reproduces, from ``res`` (its results.json) alone; ``folder`` is the report folder the
    check command names (default ``reports/<system>``). Ends with a blank line."""
    system = system_of(res)
    where = folder or report_folder(res)
    return [*_BUILDERS[system](res), _rerun_line(system, res, where), ""]


def readme_page(title: str, res: dict[str, Any], body: list[str], notes: str | None = None) -> str:
    """A reproduction's README.md: ``# title``, the block of :func:`statement_lines`, the
    ``body`` lines, then the folder's hand-written ``notes`` (stripped) if the page includes
    them; wrapped like every generated page (:func:`ldp_audit.report.markdown.wrap_markdown`)."""
    tail = ["", notes.strip()] if notes else []
    return wrap_markdown("\n".join([f"# {title}", "", *statement_lines(res), *body, *tail, ""]))
