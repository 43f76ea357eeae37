"""A fifth, toy system: each agent holds a private bit and releases it ``reports`` times
through randomized response. docs/systems.md shows this file; tests/test_systems.py registers it
through the ``ldp_audit.systems`` entry point group and drives it from the generic CLI."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.config import bounds
from ldp_audit.errors import InvalidParameterError
from ldp_audit.systems import ArraySpec, SystemSpec, TrainResult, TranscriptSchema


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    """One toy run."""

    agents: int = field(default=20, metadata=bounds(minimum=1, maximum=1_000_000))
    """Agents, each with one private bit."""
    reports: int = field(default=3, metadata=bounds(minimum=1, maximum=1_000))
    """Reports per agent, each at ``epsilon``."""
    epsilon: float = field(default=1.0, metadata=bounds(minimum=0, open_min=True))
    """Epsilon of one report (randomized response on the bit)."""

    def __post_init__(self) -> None:
        for name in ("agents", "reports"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {v!r}")
        e = self.epsilon
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < math.inf:
            raise InvalidParameterError(f"epsilon must be a real number > 0, got {e!r}")

    def mechanism(self) -> Any:
        from ldp_audit.mechanisms import RandomizedResponse

        return RandomizedResponse(epsilon=float(self.epsilon), k=2)


def train(
    cfg: ToyConfig,
    *,
    seed: int,
    run_dir: Any = None,
    ledger: Any = None,
    progress: Any = None,
    run_mode: str = "new",
) -> TrainResult:
    """Every report goes through ldp_audit.release (charged first), into the transcript."""
    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.release import Transcript, release
    from ldp_audit.rundir import RunWriter

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, size=cfg.agents)
    writer = None
    if run_dir is not None:
        writer = RunWriter(
            run_dir,
            algorithm="toy",
            config=vars(cfg),
            seed=seed,
            mechanism=cfg.mechanism().to_config(),
            mode=run_mode,
        )
        ledger = writer.open_ledger()
    acc = Accountant(ledger=ledger if ledger is not None else Ledger(":memory:"))
    tr = Transcript()
    ids = [f"agent-{a}" for a in range(cfg.agents)]
    for r in range(cfg.reports):
        rel = release(
            bits[:, None].astype(float),
            mechanism=cfg.mechanism(),
            accountant=acc,
            agent_ids=ids,
            rng=rng,
            meta={"agent": np.arange(cfg.agents), "round": np.full(cfg.agents, r)},
        )
        tr.append(rel)
    privacy = {"epsilon_per_agent": cfg.epsilon * cfg.reports, "local": True}
    metrics = {"reports": cfg.agents * cfg.reports}
    if writer is not None:
        writer.write_npz("transcript.npz", tr.arrays())
        writer.write_npz("secrets.npz", {"bit": bits})
        writer.write_json("metrics.json", {**metrics, "privacy": privacy})
        writer.finish()
    return TrainResult(
        system="toy",
        config=cfg,
        seed=seed,
        seconds=time.perf_counter() - t0,
        privacy=privacy,
        metrics=metrics,
        run_dir=None if run_dir is None else Path(run_dir),
    )


def charges(tr: dict[str, np.ndarray], cfg: ToyConfig) -> dict[str, int]:
    """One charge of ``agent-<a>`` per report."""
    ids, n = np.unique(tr["agent"], return_counts=True)
    return {f"agent-{int(a)}": int(c) for a, c in zip(ids, n, strict=True)}


def guess(run_dir: Any, *, seed: int = 0, confidence: float = 0.95, progress: bool = False) -> Any:
    """Majority vote of each agent's reports, scored against its bit."""
    from ldp_audit.attacks.scoring import AttackResult
    from ldp_audit.rundir import RunDir

    run = RunDir(run_dir)
    tr, cfg = run.transcript(), run.train_config
    votes = np.zeros(cfg.agents)
    np.add.at(votes, tr["agent"], tr["report"][:, 0])
    guessed = (votes * 2 > cfg.reports).astype(int)
    bits = run.secrets(for_scoring=True)["bit"]
    return AttackResult.from_guesses(
        attack="toy-guess",
        mechanism=cfg.mechanism().to_config(),
        epsilon=cfg.epsilon,
        reports_per_agent=cfg.reports,
        k=2,
        n=cfg.agents,
        correct=int(np.sum(guessed == bits)),
        confidence=confidence,
        # the bits' shares: with unequal ones, always guessing the commoner bit beats the
        # equal-shares ceiling whatever epsilon is (a false violation without them)
        shares=tuple(np.bincount(bits, minlength=2) / cfg.agents),
    )


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict[str, Any]]:
    m = __import__("json").loads((Path(run_dir) / "metrics.json").read_text())
    return [{"id": "toy", "title": "Toy reports", "paragraphs": [f"{m['reports']} reports."]}]


SYSTEM = SystemSpec(
    name="toy",
    summary="a toy system: private bits through randomized response",
    config=ToyConfig,
    trainer=train,
    schema=TranscriptSchema(
        (
            ArraySpec("report", "iu", 2),
            ArraySpec("agent", "iu", 1),
            ArraySpec("round", "iu", 1),
        )
    ),
    targets=lambda cfg: [("bit", cfg.mechanism())],
    charges=charges,
    attacks={"toy-guess": f"{__name__}:guess"},
    report_sections=f"{__name__}:report_sections",
    tiny_config={"agents": 20, "reports": 3, "epsilon": 2.0},
)
