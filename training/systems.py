"""The four shipped systems as :class:`ldp_audit.systems.SystemSpec` registrations.

Each is declared with ``"module:attr"`` strings, so listing them imports no trainer; the thin
adapters below give every trainer the one signature of :meth:`ldp_audit.systems.System.train`
and return :class:`ldp_audit.systems.TrainResult` (the trainer's own result, unchanged, is its
``native``). The adapters call the trainers exactly as their CLI commands do: results do not
change.

==========  =================================  ===========================================
system      releases (audit targets)           ledger agent of a transcript row
==========  =================================  ===========================================
pgc-a3c     Laplace / PRS gradient reports     ``<trial>/<agent>``, one charge per row
dprl        DP-SGD updates (central) or noisy  ``model`` per update; ``ep<episode>`` per
            observations (local)               observation
fedrl       Gaussian noise on Q outputs and    ``<run>/alpha``, ``<run>/beta`` (``@fedrl1``,
            on the targets Y                   ``@fedrl2`` at test time), ``<run>/alpha:Y``:
                                               one charge per exchange
frd         proxy-memory upload (RR + bit      ``<group>/<agent>``, one charge per upload
            flip per pair) or none
==========  =================================  ===========================================
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.parse import parse_int, parse_private_param
from ldp_audit.systems import ArraySpec, Command, SystemSpec, TranscriptSchema

__all__ = ["PGC_A3C", "PGC_SCHEMA", "DPRL", "FEDRL", "FRD"]

_I, _F = "iu", "f"


def _train_command(**kw: Any) -> Command:
    """A shipped system's ``train`` subcommand: no ``--set``; ``--json`` puts the metrics at the
    top level of the document."""
    return Command(set_option=False, flat_json=True, **kw)


# ----------------------------------------------------------------------------------------------
# PGC-A3C
# ----------------------------------------------------------------------------------------------


#: transcript.npz of a PGC-A3C run, on CartPole (d = 112) or a Gymnasium env (pgc-a3c-gym,
#: d = hidden (obs + actions + 1)); run_dir.TRANSCRIPT_KEYS is its order of arrays.
PGC_SCHEMA = TranscriptSchema(
    (
        ArraySpec("trial", _I, 1, doc="trial of the submission"),
        ArraySpec("agent", _I, 1, doc="agent (in arrival order within its trial)"),
        ArraySpec("worker", _I, 1, optional=True, doc="worker slot"),
        ArraySpec("round", _I, 1, optional=True, doc="the agent's round (0..T-1)"),
        ArraySpec("submission", _I, 1, doc="submission index n"),
        ArraySpec("theta_index", _I, 1, indexes="thetas", doc="thetas row of the gradient"),
        ArraySpec("report", _F, 2, doc="the noisy report (N, d)"),
        ArraySpec("score", _F, 1, doc="the episode's return (zeta_n)"),
        ArraySpec("thetas", _F, 2, rows=None, doc="the broadcast parameters (V, d)"),
    )
)


def pgc_targets(cfg: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    """The per-submission report mechanism, audited in the report's dimension (112)."""
    from ldp_audit.training.pgc_a3c.model import DIM

    return [("report", cfg.make_mechanism(), {"dim": DIM})]


def _per_row(ids: Any) -> dict[str, int]:
    return dict(Counter(str(a) for a in ids))


def pgc_charges(tr: Mapping[str, np.ndarray], cfg: Any) -> dict[str, int]:
    """One charge of ``<trial>/<agent>`` per submission."""
    return _per_row(f"{int(t)}/{int(a)}" for t, a in zip(tr["trial"], tr["agent"], strict=True))


PGC_A3C = SystemSpec(
    name="pgc-a3c",
    summary="PGC-A3C (Ono & Takahashi 2020): local DP on gradients, CartPole with private gravity",
    config="ldp_audit.training.pgc_a3c.config:PgcA3cConfig",
    trainer="ldp_audit.training.pgc_a3c.grid:train_run",
    schema=PGC_SCHEMA,
    targets="ldp_audit.training.systems:pgc_targets",
    charges="ldp_audit.training.systems:pgc_charges",
    attacks={"dynamics": "ldp_audit.attacks.run_scorers:pgc_dynamics"},
    report_sections="ldp_audit.training.pgc_a3c.report:report_sections",
    reproduce="ldp_audit.training.pgc_a3c.command:reproduce",
    reproduce_command=Command(
        help="Tables 1-3 and Figures 2-3 of Ono & Takahashi (2020)",
        description="Run epsilon in {1,2,5,10,inf} x {laplace, prs}, K trials each, and write "
        "results.json, tables.md, figure2.png, figure3.png and README.md.",
        options="ldp_audit.training.pgc_a3c.command:reproduce_options",
        out="runs/reproduce-pgc-a3c",
    ),
    train_command=_train_command(
        help="PGC-A3C (Ono & Takahashi 2020) on CartPole with private gravity",
        description="Run K seeded PGC-A3C trials at one setting and report FST (eq. 26), "
        "success ratio (eq. 27) and the privacy spent per agent.",
        options="ldp_audit.training.pgc_a3c.command:options",
        from_args="ldp_audit.training.pgc_a3c.command:config",
        skip=("n_agents", "gravities", "agent_gravities", "budget"),
        out="runs/pgc-a3c",
        sizes="ldp_audit.training.pgc_a3c.command:sizes",
        show="ldp_audit.training.pgc_a3c.command:show",
    ),
    tiny_config={"mechanism": "laplace", "epsilon": 1.0, "trials": 2, "max_submissions": 30},
)


# ----------------------------------------------------------------------------------------------
# DP-SGD RL and observation-noise RL
# ----------------------------------------------------------------------------------------------


#: DP-SGD: one row per update; observation noise: one row per released observation
_DPRL_SCHEMAS = {
    "dpsgd": (
        ArraySpec("update_index", _I, 1, doc="update number"),
        ArraySpec("update_norm", _F, 1, doc="L2 norm of the released noisy update"),
        ArraySpec("update", _F, 2, optional=True, doc="the released noisy update"),
        ArraySpec("canary_projection", _F, 2, optional=True, doc="update x canary directions"),
    ),
    "obs-noise": (
        ArraySpec("observation", _F, 2, doc="the released noisy observation"),
        ArraySpec("episode", _I, 1, doc="episode (the privacy unit)"),
        ArraySpec("step", _I, 1, doc="step within the episode"),
    ),
}


def dprl_schema(cfg: Any) -> TranscriptSchema:
    """The arrays of :data:`_DPRL_SCHEMAS` for the run's privacy (none without privacy)."""
    return TranscriptSchema(_DPRL_SCHEMAS.get(cfg.privacy, ()))


def dprl_targets(cfg: Any) -> list[tuple[str, Any]]:
    """Observation noise: its mechanism. DP-SGD: refused (see the message)."""
    if cfg.privacy == "obs-noise":
        return [("observation", cfg.obs_mechanism())]
    if cfg.privacy == "dpsgd":
        hint = (
            "`ldp-audit attack membership --run-dir RUN --out FILE` runs the one-run canary "
            "audit (Steinke, Nasr & Jagielski 2023) on this run's planted canaries"
            if cfg.canaries
            else "train with --canaries N and audit the run with `ldp-audit attack membership "
            "--run-dir RUN --out FILE` (the one-run canary audit, Steinke, Nasr & Jagielski 2023)"
        ) + "; `ldp-audit report RUN FILE` reads it (nothing is written into the run)"
        raise InvalidParameterError(
            "this dprl run released DP-SGD updates: a Poisson-subsampled Gaussian mechanism "
            f"(sample rate {cfg.sample_rate:g}, noise multiplier {cfg.noise_multiplier:g}) "
            "composed over every update; the one-shot black-box auditor audits one mechanism "
            "on a pair of inputs and cannot express subsampling or composition over a training "
            f"run, so `audit --run-dir` does not audit it; {hint}"
        )
    return []


def dprl_charges(tr: Mapping[str, np.ndarray], cfg: Any) -> dict[str, int]:
    """``model`` once per DP-SGD update; ``ep<episode>`` once per released observation."""
    if cfg.privacy == "dpsgd":
        n = int(np.asarray(tr.get("update_index", ())).shape[0])
        return {"model": n} if n else {}
    if cfg.privacy == "obs-noise":
        return _per_row(f"ep{int(e)}" for e in tr["episode"])
    return {}


DPRL = SystemSpec(
    name="dprl",
    summary="DP-SGD RL (central DP, Opacus) and observation-noise RL on CartPole",
    config="ldp_audit.training.dprl.config:DprlConfig",
    trainer="ldp_audit.training.dprl.trainer:train_run",
    schema="ldp_audit.training.systems:dprl_schema",
    targets="ldp_audit.training.systems:dprl_targets",
    charges="ldp_audit.training.systems:dprl_charges",
    attacks={"membership": "ldp_audit.attacks.run_scorers:dprl_membership"},
    report_sections="ldp_audit.training.statements:dprl_report",
    reproduce="ldp_audit.training.dprl.reproduce:reproduce",
    train_command=_train_command(
        help="DP-SGD (Opacus) or observation-noise REINFORCE / DQN on CartPole-v1",
        description="Train one agent on CartPole-v1 under central DP-SGD (privacy unit: an "
        "episode for REINFORCE, a transition for DQN), observation noise ('LDP'), or no "
        "privacy; every update is charged to the ledger before its noise is drawn. Writes a "
        "run directory; --canaries plants gradient canaries for the one-run audit "
        "(ldp-audit attack membership --run-dir RUN --out FILE).",
        out="runs/dprl",
        sizes="ldp_audit.training.sizes:dprl_estimates",
        show="ldp_audit.training.dprl.trainer:summary_lines",
    ),
    reproduce_command=Command(
        help="Figures 8-9 and 12-13 of the Doulazmi & Odonnat slides (reward/convergence vs noise)",
        description="Reward and convergence time vs noise level for REINFORCE and DQN under "
        "DP-SGD and observation noise, several seeds, with 95 percent bootstrap bands and the "
        "epsilon each setting gets; writes results.json, figures and README.md.",
        config="ldp_audit.training.dprl.config:ReproduceSettings",
        options="ldp_audit.training.systems:cache_option",
        out="runs/reproduce-dprl",
        sizes="ldp_audit.training.sizes:dprl_reproduce_estimates",
    ),
    tiny_config=tuple(
        {"algo": "reinforce", "episodes": 8, "num_envs": 4, "hidden": 16, "privacy": p}
        for p in ("dpsgd", "obs-noise")
    ),
)


# ----------------------------------------------------------------------------------------------
# FedRL
# ----------------------------------------------------------------------------------------------


def fedrl_schema(cfg: Any) -> TranscriptSchema:
    """``q_*``: every released Q-output row; ``y_*``: every released target Y (FedRL only)."""
    if "fedrl" not in cfg.methods:
        return TranscriptSchema(())  # the baselines release nothing
    q = tuple(
        ArraySpec(f"q_{k}", _I, 1, rows="q", doc=d)
        for k, d in (
            ("trial", "run"),
            ("sender", "0 alpha, 1 beta"),
            ("kind", "0 act, 1 minibatch, 2 beta's target outputs, 3 FedRL-1 test, 4 FedRL-2"),
            ("step", "iteration (or test step)"),
            ("map_index", "map played"),
        )
    )
    y = (
        ArraySpec("y_report", _F, 1, rows="y", doc="released target Y"),
        ArraySpec("y_trial", _I, 1, rows="y", doc="run"),
        ArraySpec("y_step", _I, 1, rows="y", doc="iteration"),
    )
    return TranscriptSchema(
        (ArraySpec("q_report", _F, 2, rows="q", doc="released Q outputs"), *q, *y)
    )


def fedrl_targets(cfg: Any) -> list[tuple[str, Any]]:
    """The Gaussian mechanisms on Q outputs and on the targets Y (FedRL runs only)."""
    if "fedrl" not in cfg.methods:
        return []
    return [("q_output", cfg.output_mechanism()), ("target_y", cfg.target_mechanism())]


_FEDRL_CHANNEL = {0: "", 1: "", 2: "", 3: "@fedrl1", 4: "@fedrl2"}


def fedrl_charges(tr: Mapping[str, np.ndarray], cfg: Any) -> dict[str, int]:
    """One charge per exchange. In training the rows of one (run, sender, kind, step) are one
    exchange; at test time (kinds 3, 4; step -1) each test step is one exchange of one row per
    test map (``eval_maps`` rows)."""
    out: Counter[str] = Counter()
    if "q_trial" in tr:
        keys = np.stack([tr["q_trial"], tr["q_sender"], tr["q_kind"], tr["q_step"]], axis=1)
        uniq, rows = np.unique(keys, axis=0, return_counts=True)
        for (run, sender, kind, _), n in zip(uniq, rows, strict=True):
            who = "alpha" if int(sender) == 0 else "beta"
            k = int(kind)
            # a test exchange count that is not a whole number of steps shows as a mismatch
            charges = 1 if k < 3 else -(-int(n) // int(cfg.eval_maps))
            out[f"{int(run)}/{who}{_FEDRL_CHANNEL[k]}"] += charges
    if "y_trial" in tr:
        for run, _ in np.unique(np.stack([tr["y_trial"], tr["y_step"]], axis=1), axis=0):
            out[f"{int(run)}/alpha:Y"] += 1
    return dict(out)


#: a FedRL run of a few seconds (the contract test's)
FEDRL_TINY = dict(size=8, n_maps=100, train_steps=20, n_envs=4, batch_size=8, learning_starts=16,
                  eval_maps=5, target_update=5, prepay_block=7, clip_outputs=1.0,
                  methods=["fedrl"])  # fmt: skip

FEDRL = SystemSpec(
    name="fedrl",
    summary="FedRL (Zhuo et al. 2019): Gaussian noise on shared Q outputs, GridWorld",
    config="ldp_audit.training.fedrl.config:FedRLConfig",
    trainer="ldp_audit.training.fedrl.runs:train_run",
    schema="ldp_audit.training.systems:fedrl_schema",
    targets="ldp_audit.training.systems:fedrl_targets",
    charges="ldp_audit.training.systems:fedrl_charges",
    attacks={"fedrl": "ldp_audit.attacks.run_scorers:fedrl_transcript"},
    report_sections="ldp_audit.training.statements:fedrl_report",
    reproduce="ldp_audit.training.fedrl.reproduce:reproduce",
    attack_commands={
        "fedrl": Command(
            help="attack a FedRL run's transcript (beta's cells, alpha's rewards) and audit its "
            "output mechanism",
            description="From beta's released Q outputs, recover its private 5x5 window; from "
            "alpha's released targets Y, its rewards (scikit-learn). Accuracy with intervals vs "
            "the ceiling the (epsilon, delta) guarantee allows. With clipped outputs also "
            "audits the output mechanism as a black box (audit.json). Exit 1 on a violation.",
            options="ldp_audit.training.systems:fedrl_attack_options",
        )
    },
    train_command=_train_command(
        help="FedRL (Zhuo et al. 2019): two-agent federated DQN with noisy Q outputs",
        description="Train FedRL and its baselines (DQN-alpha, DQN-full) on GridWorld; every "
        "exchanged Q output is charged to its sender's ledger before release. Prints each "
        "agent's epsilon (or why it is infinite).",
        options="ldp_audit.training.systems:threads_option",
        from_args="ldp_audit.training.systems:fedrl_config",
        forward=("threads",),
        out="runs/fedrl",
        sizes="ldp_audit.training.sizes:fedrl_estimates",
        show="ldp_audit.training.fedrl.runs:summary_lines",
        resume=False,  # a run is short (training.fedrl.runs.train_run refuses "resume")
    ),
    reproduce_command=Command(
        help="FedRL Table 1, Figure 4 (history length) and the attack sweep",
        description="Reproduce FedRL's Table 1 (SuccRate and AvgRwd of DQN-alpha, FedRL-1, "
        "FedRL-2, DQN-full), the history-length study (Figure 4) and the transcript attack "
        "at sigma in {0, 0.1, 1, 5} with and without clipping, at the scale given.",
        config="ldp_audit.training.fedrl.reproduce:ReproConfig",
        out="runs/reproduce-fedrl",
        sizes="ldp_audit.training.sizes:fedrl_reproduce_estimates",
    ),
    tiny_config=FEDRL_TINY,
)


# ----------------------------------------------------------------------------------------------
# FRD
# ----------------------------------------------------------------------------------------------


def frd_schema(cfg: Any) -> TranscriptSchema:
    """One row per uploaded (cell, value) pair; FedAvg also the broadcast parameters."""
    arrays = [
        ArraySpec("trial", _I, 1, doc="group"),
        ArraySpec("agent", _I, 1, doc="agent within its group"),
        ArraySpec("submission", _I, 1, doc="the agent's upload number"),
        ArraySpec("theta_index", _I, 1, doc="row of thetas (FedAvg)"),
        ArraySpec("report", _F, 2, doc="uploaded [cell, value] rows (FRD) or parameters"),
    ]
    if cfg.mode == "fedavg":
        arrays.append(ArraySpec("thetas", _F, 2, rows=None, doc="broadcast global parameters"))
    return TranscriptSchema(tuple(arrays))


def frd_targets(cfg: Any) -> list[tuple[str, Any] | tuple[str, Any, dict[str, Any]]]:
    """The LDP variant's per-pair mechanism; the non-private upload has nothing to audit.

    An upload of ``m`` pairs is ``epsilon``-LDP because each pair is ``epsilon / m``-LDP
    (randomized response on the cell, bit flip on the policy value): the per-pair claim is the
    upload mechanism with one sample at ``epsilon / m``, audited on rows ``[cell id, 2
    pi(left) - 1]``.
    """
    up = cfg.make_mechanism()
    if cfg.ldp_epsilon is None:
        return [("upload", up)]  # NoPrivacy: epsilon inf, reported so
    last = float(int(up.n_cells) - 1)
    pairs = [(np.array([0.0, 1.0]), np.array(x)) for x in ([last, -1.0], [0.0, -1.0], [1.0, 1.0])]
    return [("upload_pair", replace(up, epsilon=up.pair_epsilon, samples=1), {"pairs": pairs})]


def frd_charges(tr: Mapping[str, np.ndarray], cfg: Any) -> dict[str, int]:
    """One charge of ``<group>/<agent>`` per upload (the rows of one submission)."""
    if not len(tr["trial"]):
        return {}
    keys = np.unique(np.stack([tr["trial"], tr["agent"], tr["submission"]], axis=1), axis=0)
    return _per_row(f"{int(t)}/{int(a)}" for t, a, _ in keys)


#: an LDP FRD run of a few seconds (the contract test's)
FRD_TINY = dict(n_agents=2, groups=2, sections=10, exchange_period=3, initial_episodes=2,
                hidden=8, layers=1, max_episodes=9, stop_at_mission=False, ldp_epsilon=0.5,
                ldp_samples=4)  # fmt: skip

FRD = SystemSpec(
    name="frd",
    summary="FRD (Cha et al. 2019): proxy experience memory exchange, and its LDP variant",
    config="ldp_audit.training.frd.config:FrdConfig",
    trainer="ldp_audit.training.frd.run:train_run",
    schema="ldp_audit.training.systems:frd_schema",
    targets="ldp_audit.training.systems:frd_targets",
    charges="ldp_audit.training.systems:frd_charges",
    attacks={
        "dynamics": "ldp_audit.attacks.frd:run",
        "frd": "ldp_audit.attacks.frd:run",
    },
    report_sections="ldp_audit.training.statements:frd_report",
    reproduce="ldp_audit.training.frd.reproduce:reproduce",
    attack_commands={
        "frd": Command(
            help="dynamics inference on an FRD/FedAvg run's uploads",
            description="Shadow-training attack recovering each agent's gravity from what it "
            "uploaded; writes RUN_DIR/attack_dynamics.json (or --out FILE).",
            options="ldp_audit.training.systems:frd_attack_options",
            sizes="ldp_audit.training.sizes:frd_attack_estimates",
        )
    },
    train_command=_train_command(
        help="FRD (Cha et al. 2019) / FedAvg on CartPole-v1 with a private gravity (or another "
        "CartPole constant, --private-param)",
        description="Train groups of A2C agents that exchange a proxy experience memory (FRD) "
        "or their parameters (FedAvg) every E episodes after I; every upload is charged to the "
        "agent's ledger (non-private: NonPrivateEvent; --epsilon: the LDP variant).",
        options="ldp_audit.training.systems:frd_options",
        from_args="ldp_audit.training.systems:frd_config",
        skip=("private_values",),
        out="runs/frd-{mode}",
        sizes="ldp_audit.training.sizes:frd_estimates",
        show="ldp_audit.training.frd.run:summary_lines",
    ),
    reproduce_command=Command(
        help="Figures 3-4 of Cha et al. 2019 + the leak experiment",
        description="Episodes to mission vs agents for Table 1 settings (Figure 3), FRD vs "
        "FedAvg and the LDP variant (Figure 4), and the dynamics attack on small runs.",
        config="ldp_audit.training.frd.reproduce:ReproduceSettings",
        out="runs/reproduce-frd",
        sizes="ldp_audit.training.sizes:frd_reproduce_estimates",
    ),
    tiny_config=FRD_TINY,
)


# ----------------------------------------------------------------------------------------------
# The command line's parts that are not config fields (ldp_audit.systems.Command)
# ----------------------------------------------------------------------------------------------


def cache_option(p: Any) -> None:
    """``reproduce dprl --cache``."""
    p.add_argument("--cache", default=None,
                   help="folder keeping every finished run; a rerun with it resumes")  # fmt: skip


def _int_option(p: Any, flag: str, minimum: int, default: int | None, **kw: Any) -> None:
    """An integer option ``flag`` >= ``minimum`` (read by :func:`ldp_audit.parse.parse_int`)."""

    p.add_argument(flag, type=lambda t: parse_int(t, flag, minimum=minimum), default=default, **kw)


def threads_option(p: Any) -> None:
    """``train fedrl --threads``."""
    words = "torch threads while training (one is fastest on a small shared machine)"
    _int_option(p, "--threads", 1, 1, help=words)


def fedrl_config(args: Any, kw: dict[str, Any]) -> Any:
    """A method named twice (``--methods fedrl fedrl``) is trained once."""
    from ldp_audit.training.fedrl.config import FedRLConfig

    if "methods" in kw:
        kw["methods"] = tuple(dict.fromkeys(kw["methods"]))
    return FedRLConfig(**kw)


def frd_options(p: Any) -> None:
    """``train frd --setting`` (a preset of six fields) and ``--private-param NAME=V1,V2``
    (one option, two fields)."""

    p.add_argument("--setting", type=lambda t: parse_int(t, "--setting", minimum=1, maximum=7),
                   default=1, metavar="{1..7}",
                   help="Table 1 setting (S, E, I, network size, cut components); --sections, "
                   "--exchange-period, --initial-episodes, --hidden, --layers and --proxy-dims "
                   "override it")  # fmt: skip
    p.add_argument("--private-param", type=parse_private_param, default=None,
                   metavar="NAME=V1,V2,...",
                   help="each agent's private CartPole constant and its candidate values, one "
                   "drawn uniformly per agent (seeded): gravity, masscart, masspole, length or "
                   "force_mag (e.g. length=0.25,0.5,1); stored in secrets.npz, validated on a "
                   "CartPole first")  # fmt: skip


def frd_config(args: Any, kw: dict[str, Any]) -> Any:
    """The setting's preset, the options given over it (FrdConfig refuses ``--epsilon`` but
    with ``--mode frd``; inf is the non-private upload); the secret from ``--gravities`` or
    ``--private-param`` (not both)."""
    from ldp_audit.training.frd.config import setting_config

    gravities, pp = kw.get("gravities"), args.private_param
    if pp is not None and gravities is not None:
        raise InvalidParameterError(
            f"--gravities and --private-param both declare the secret: give one (--private-param "
            f"{pp[0]}=... with --gravities {','.join(map(str, gravities))})"
        )
    if pp is not None:  # gravity's candidates become gravities (FrdConfig)
        kw.update(private_param=pp[0], private_values=pp[1])
    return setting_config(args.setting, **kw)


def fedrl_attack_options(p: Any) -> None:
    """``attack fedrl --audit-samples N`` (0: no audit of the output mechanism)."""
    words = "samples per input of the black-box audit (0: no audit)"
    _int_option(p, "--audit-samples", 0, 200_000, help=words)


def frd_attack_options(p: Any) -> None:
    """``attack frd --shadow N --max-groups G``."""
    _int_option(
        p, "--shadow", 1, 24, dest="n_shadow", metavar="SHADOW", help="shadow agents per gravity"
    )
    _int_option(p, "--max-groups", 1, None, help="attack the first N agents only (default: all)")
