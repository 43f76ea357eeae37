"""Reproduce Tables 1-3 and Figures 2-3 of Ono & Takahashi (2020) with PGC-A3C.

The grid and the run here, top to bottom: the grid of settings (epsilon in {1, 2, 5, 10, inf}
x {Laplace, PRS}), K trials each through ``ldp_audit.training.pgc_a3c.train``, the metrics of
``ldp_audit.training.pgc_a3c.metrics`` (eqs. 25-27,
relative AUC), and the report written to ``reports/pgc-a3c/``:

- ``results.json``: every setting's FSTs, medians, success ratios, relative AUCs with confidence
  intervals, the Figure 2 curves, timings, the exact configuration and library versions;
- ``tables.md``: Tables 1-3 with our numbers beside the paper's;
- ``figure2.png``: average score mu_n (eq. 25) during training at epsilon = 1 with |B| = 1 and
  |B| = 100, both mechanisms (the paper's Figure 2);
- ``figure3.png``: success ratio (eq. 27) against submissions per epsilon, (a) Laplace, (b) PRS
  (the paper's Figure 3);
- ``README.md``: how it was run, where our numbers differ from the paper's and why (a hand-written
  ``notes.md`` in the same folder, if present, is included verbatim).

Library code: nothing here prints; progress goes to a tqdm bar on stderr when asked.

Our resolutions (also in README.md, "Reproducing PGC-A3C"): the epsilon = inf column is the engine's
non-private baseline (``mechanism="none"``: no noise; the gradient keeps a stabilising L1 clip
C/2 with C = 10, since unclipped SGD at eta = 0.5 diverges), run with each mechanism's buffer
size (|B| = 1 beside Laplace, |B| = 100 beside PRS); the relative AUC of every setting is taken
against the epsilon = inf Laplace (|B| = 1) curve, the paper's non-private A3C.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ldp_audit.config import bounds
from ldp_audit.errors import InvalidParameterError
from ldp_audit.rundir.writer import versions
from ldp_audit.training.pgc_a3c import metrics
from ldp_audit.training.pgc_a3c.privacy import PrivacyClaimWarning, coordinate_warning
from ldp_audit.training.reproduction import check_fields, provenance

__all__ = [
    "GridConfig",
    "ReproduceConfig",
    "Setting",
    "engine_config",
    "run_reproduction",
]

INF = float("inf")

#: Buffer sizes the paper uses in Tables 1-3 (section 4.1): Laplace |B| = 1, PRS |B| = 100.
PAPER_BUFFER = {"laplace": 1, "prs": 100}
MECHANISMS = ("laplace", "prs")
#: ``train_grid`` engines a reproduction may use (identical results; "fused" is faster)
ENGINES = ("fused", "lockstep")
_AT_LEAST_1 = bounds(minimum=1)


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """What both PGC-A3C reproductions take (:class:`ReproduceConfig`, Tables 1-3, and
    :class:`~ldp_audit.training.pgc_a3c.readings.ReadingsConfig`, the readings): the scale, the
    seed, the intervals and where the grid runs, checked by name and value."""

    trials: int = field(default=20, metadata=_AT_LEAST_1)
    """K, independent training runs per setting (the paper: 20)."""
    max_submissions: int = field(default=90_000, metadata=bounds(minimum=metrics.WINDOW))
    """Submissions per run and the x-axis end of Figure 3 / the AUC (the paper: 90,000);
    trials that stop at their FST end earlier."""
    seed: int = field(default=0, metadata=bounds(minimum=0))
    """Master seed; each setting gets its own stream derived from it (the readings give each
    row the seed the main reproduction gives it)."""
    confidence: float = field(
        default=0.95, metadata=bounds(minimum=0, maximum=1, open_min=True, open_max=True)
    )
    """Level of every confidence interval of the learning measures."""
    n_resamples: int = field(default=10_000, metadata=bounds(minimum=100))
    """Bootstrap resamples per interval (at least 100, as :func:`metrics.median_ci` takes)."""
    workers: int = field(default=1, metadata=_AT_LEAST_1)
    """Processes (``backend="local"``) or Ray CPUs started here (``backend="ray"`` without
    ``address``) the grid is spread over; results do not depend on it."""
    backend: str = "local"
    """Where the grid runs (:mod:`ldp_audit.backends`): "local" (this process, or a local
    process pool with ``workers`` > 1) or "ray"; results do not depend on it."""
    address: str | None = None
    """Ray cluster address (``backend="ray"`` only; None: start Ray on this machine)."""

    def __post_init__(self) -> None:
        from ldp_audit.backends import check_backend

        check_fields(self)  # each field's type and bounds, the field named in the error
        check_backend(self.backend, self.address, self.workers)


@dataclass(frozen=True, kw_only=True)
class ReproduceConfig(GridConfig):
    """What to run. The defaults are the paper's experiment."""

    epsilons: tuple[float, ...] = field(
        default=(1.0, 2.0, 5.0, 10.0, INF), metadata=bounds(minimum=0, open_min=True, inf=True)
    )
    """The epsilon grid (inf: non-private A3C)."""
    mechanisms: tuple[str, ...] = field(default=MECHANISMS, metadata=bounds(choices=MECHANISMS))
    """Mechanisms of the grid."""
    figure2: bool = True
    """Also run the Figure 2 settings (epsilon = 1 with the other buffer size) for the curves."""
    figure2_trials: int | None = field(default=None, metadata=_AT_LEAST_1)
    """Trials per Figure 2 setting not already in the grid (default: ``trials``)."""
    figure2_submissions: int | None = field(default=None, metadata=bounds(minimum=metrics.WINDOW))
    """Submissions per extra Figure 2 run (default: ``max_submissions``). Full runs whose
    trials learn play 200-step episodes to the end, which sets the pace of the whole batch."""
    stop_at_target: bool = True
    """Stop a grid trial once its FST is known (Tables 1-3 and Figure 3 need only FSTs); the
    Figure 2 curves are then taken from separate full-length runs. ``False`` runs every grid
    trial to ``max_submissions`` (and takes Figure 2's grid settings from the grid)."""
    acting: str = field(default="argmax", metadata=bounds(choices=("argmax", "sample")))
    """``PgcA3cConfig.acting`` of every run: "argmax" (the paper as printed) or "sample"."""
    chunks: int | None = field(default=None, metadata=_AT_LEAST_1)
    """Tasks the configs are dealt into (each one ``train_grid`` batch); None: ``workers``
    for a local pool or Ray here, the cluster's CPU count (at most the number of configs) with
    an ``address``. Results do not depend on it."""
    clip_kind: str = field(default="l1", metadata=bounds(choices=("l1", "coordinate")))
    """``PgcA3cConfig.clip_kind`` of the Laplace rows: "l1" (eq. 19 as printed) or "coordinate"
    (an ablation whose reports are 112-epsilon-LDP; the report then says so beside each row)."""
    aggregator: str = field(default="sgd", metadata=bounds(choices=("sgd", "adam", "rmsprop")))
    """``PgcA3cConfig.aggregator`` of every run: "sgd" (eq. 22), "adam" or "rmsprop"."""
    aggregator_lr: float | None = field(default=None, metadata=bounds(minimum=0, open_min=True))
    """``PgcA3cConfig.aggregator_lr`` of every run (None: eta for sgd, 1e-3 otherwise)."""
    target: str = field(default="engine", metadata=bounds(choices=("engine", "literal-eq18")))
    """``PgcA3cConfig.target`` of every run: "engine" or "literal-eq18"."""
    engine: str = field(default="fused", metadata=bounds(choices=ENGINES))
    """``train_grid``'s engine: "fused" (the compiled block kernel) or "lockstep" (one Python
    lock-step per step). Results are bit for bit the same (tests/test_fused_pgc.py); the fused
    engine is faster."""


@dataclass(frozen=True)
class Setting:
    """One cell of the grid: a mechanism family, epsilon and buffer size."""

    mechanism: str
    """``"laplace"`` or ``"prs"`` (the table row)."""
    epsilon: float
    """Privacy parameter; ``inf`` runs the non-private baseline (``mechanism="none"``)."""
    buffer_size: int
    """|B| of the aggregator (eq. 22)."""
    trials: int
    """K."""
    stop_at_target: bool = False
    """Whether runs stop once FST is known."""
    figure2: bool = False
    """An extra full-length run for Figure 2 (its key ends in ``-fig2``)."""
    index: int = field(default=0, compare=False)
    """Position in the run order; selects the setting's seed stream."""

    @property
    def key(self) -> str:
        """Stable name, e.g. ``laplace-eps1-B1``."""
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:g}"
        tag = "-fig2" if self.figure2 else ""
        return f"{self.mechanism}-eps{eps}-B{self.buffer_size}{tag}"

    @property
    def engine_mechanism(self) -> str:
        """What ``PgcA3cConfig.mechanism`` gets: epsilon = inf is the non-private baseline."""
        return "none" if math.isinf(self.epsilon) else self.mechanism


def _settings(cfg: ReproduceConfig) -> tuple[list[Setting], list[Setting]]:
    """The grid settings and the extra Figure 2 settings, in run order."""
    grid = [
        Setting(m, float(e), PAPER_BUFFER[m], cfg.trials, cfg.stop_at_target)
        for m in cfg.mechanisms
        for e in cfg.epsilons
    ]
    extra: list[Setting] = []
    if cfg.figure2:
        k2 = cfg.figure2_trials or cfg.trials
        for m in cfg.mechanisms:
            for b in sorted(set(PAPER_BUFFER.values())):
                in_grid = Setting(m, 1.0, b, cfg.trials, False) in grid
                if cfg.stop_at_target or not in_grid:
                    extra.append(Setting(m, 1.0, b, k2, False, figure2=True))
    ordered = [dataclasses.replace(s, index=i) for i, s in enumerate(grid + extra)]
    return ordered[: len(grid)], ordered[len(grid) :]


def setting_seed(master: int, index: int) -> int:
    """Independent per-setting seed (SeedSequence of (master, index))."""
    return int(np.random.SeedSequence([master, index]).generate_state(1, dtype=np.uint32)[0])


TrainFn = Callable[[Setting, int, int], np.ndarray]


def reading_options(cfg: ReproduceConfig, engine_mechanism: str) -> dict[str, Any]:
    """The ``PgcA3cConfig`` options of a reading (ablation) that ``cfg`` asks for, for one row:
    ``clip_kind`` applies to the Laplace rows only, the others to every row; options left at
    their defaults are omitted (so the printed settings' configs are unchanged)."""
    default = ReproduceConfig()
    names = ("clip_kind",) if engine_mechanism == "laplace" else ()
    names += ("aggregator", "aggregator_lr", "target")
    return {k: getattr(cfg, k) for k in names if getattr(cfg, k) != getattr(default, k)}


def engine_config(
    setting: Setting,
    max_submissions: int,
    acting: str = "argmax",
    options: dict[str, Any] | None = None,
) -> Any:
    """The ``PgcA3cConfig`` of one grid ``setting`` (a main-reproduction cell or a readings
    row): its mechanism, epsilon (none for inf), trials, buffer and stop rule, with
    ``options`` (a reading's) on top."""
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig  # lazy: a torch-free import

    kwargs: dict[str, Any] = dict(
        mechanism=setting.engine_mechanism,
        trials=setting.trials,
        max_submissions=max_submissions,
        buffer_size=setting.buffer_size,
        stop_at_target=setting.stop_at_target,
        acting=acting,
        **(options or {}),
    )
    if not math.isinf(setting.epsilon):
        kwargs["epsilon"] = setting.epsilon
    return PgcA3cConfig(**kwargs)


def engine_grid(
    configs: list[Any],
    seeds: list[int],
    *,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = 1,
    chunks: int | None = None,
    progress: bool | None = None,
    grid_fn: Callable[..., list[Any]] | None = None,
    engine: str = "fused",
) -> list[Any]:
    """Train ``configs`` (``PgcA3cConfig``, one seed each) on a backend of
    :mod:`ldp_audit.backends`; returns the ``TrainResult`` per config, in order.

    One backend abstraction for every case: the configs are dealt round-robin into ``chunks``
    tasks (default: ``workers``; on Ray with an ``address`` or ``workers=None``, the CPUs Ray
    reports), each ONE lock-step ``train_grid`` batch (:func:`ldp_audit.backends.grid_runs`).
    A config's run never depends on the configs beside it, so the results are bit for bit
    those of one ``train_grid`` call whatever the backend, workers and chunks (tested with a
    real local Ray instance). No run
    directories: each config's ledger is an in-memory ledger of the process running it, so a
    worker killed and retried by Ray starts a fresh ledger and nothing is charged twice.
    ``grid_fn`` replaces :func:`quiet_train_grid` (tests; it must be a module-level function).
    """
    from ldp_audit.backends import check_backend, grid_runs

    backend, address, workers = check_backend(backend, address, workers)
    for c in configs:  # the library's warning, once, in this process
        if c.clip_kind == "coordinate" and c.mechanism == "laplace":
            warnings.warn(coordinate_warning(c), PrivacyClaimWarning, stacklevel=2)
    if chunks is None and backend == "ray" and (address is not None or workers is None):
        from ldp_audit.backends import init_ray

        ray = init_ray(address, workers)  # InvalidParameterError if Ray is missing
        chunks = max(1, int(ray.cluster_resources().get("CPU", 1)))
    if engine not in ENGINES:
        raise InvalidParameterError(f"engine must be one of {ENGINES}, got {engine!r}")
    if grid_fn is None:
        import functools

        from ldp_audit.training.pgc_a3c.grid import quiet_train_grid

        grid_fn = functools.partial(quiet_train_grid, engine=engine)
    return grid_runs(
        grid_fn,
        configs,
        seeds,
        chunks=chunks,  # None: workers; at most the number of configs
        backend=backend,
        address=address,
        workers=workers,
        progress="pgc-a3c submissions" if progress else None,
        work=lambda c: c.trials * c.max_submissions,
    )


def _curve(zeta: np.ndarray, points: int = 900) -> dict[str, list[float | None]]:
    """Across-trial mean of mu_n (eq. 25), thinned to about ``points`` block means."""
    mu = metrics.moving_average(zeta)  # (trials, N), NaN where undefined
    n = mu.shape[1]
    step = max(1, n // points)
    nb = n // step
    blocks = mu[:, : nb * step].reshape(mu.shape[0], nb, step)
    ok = ~np.isnan(blocks)
    sums = np.where(ok, blocks, 0.0).sum(axis=(0, 2))
    cnt = ok.sum(axis=(0, 2))
    vals = np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan)
    x = (np.arange(nb) * step + (step + 1) / 2.0).tolist()  # block centre, 1-based n
    return {"n": x, "mean_mu": [None if math.isnan(v) else float(v) for v in vals]}


def run_reproduction(
    cfg: ReproduceConfig,
    *,
    progress: bool | None = None,
    train_fn: TrainFn | None = None,
    grid_fn: Callable[..., list[Any]] | None = None,
) -> dict[str, Any]:
    """Run the grid and compute Tables 1-3 and the Figure 2/3 data.

    Args:
        cfg: what to run (``cfg.backend``/``address``/``workers``/``chunks``: where; the
            results do not depend on them).
        progress: show a tqdm bar of the engine's submissions on stderr.
        train_fn: ``(setting, seed, max_submissions) -> zeta`` replacing the engine (tests).
        grid_fn: a module-level stand-in for ``train_grid`` run by the backend (tests).

    Returns:
        The JSON-able results dict that ``write_report`` turns into the report.
    """
    from ldp_audit.rundir import to_jsonable

    grid, extra = _settings(cfg)
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 2**31]))
    results: dict[str, Any] = {
        "paper": "Ono & Takahashi 2020, Locally Private Distributed Reinforcement Learning",
        "config": to_jsonable(asdict(cfg)),
        **provenance(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        "settings": {},
        "figure2": {},
    }
    zetas: dict[str, np.ndarray] = {}
    seeds = {s.key: setting_seed(cfg.seed, s.index) for s in grid + extra}
    horizon = {s.key: cfg.max_submissions for s in grid}
    horizon.update({s.key: cfg.figure2_submissions or cfg.max_submissions for s in extra})
    t_all = time.perf_counter()
    if train_fn is None:  # all settings and trials in lock-step batches on cfg's backend
        res = engine_grid(
            [
                engine_config(
                    s, horizon[s.key], cfg.acting, reading_options(cfg, s.engine_mechanism)
                )
                for s in grid + extra
            ],
            [seeds[s.key] for s in grid + extra],
            backend=cfg.backend,
            address=cfg.address,
            workers=cfg.workers,
            chunks=cfg.chunks,
            progress=progress,
            grid_fn=grid_fn,
            engine=cfg.engine,
        )
        zetas = {
            s.key: np.asarray(r.zeta, dtype=np.float64)
            for s, r in zip(grid + extra, res, strict=True)
        }
        secs_of = {s.key: None for s in grid + extra}
    else:  # a stand-in engine (tests): one setting at a time, timed
        secs_of = {}
        for s in grid + extra:
            t0 = time.perf_counter()
            zetas[s.key] = np.asarray(train_fn(s, seeds[s.key], horizon[s.key]))
            secs_of[s.key] = time.perf_counter() - t0
    for s in grid + extra:
        zeta = zetas[s.key]
        if zeta.shape != (s.trials, horizon[s.key]):
            raise InvalidParameterError(
                f"engine returned zeta of shape {zeta.shape}, expected "
                f"{(s.trials, horizon[s.key])} for {s.key}"
            )
        entry = {
            "mechanism": s.mechanism,
            "engine_mechanism": s.engine_mechanism,
            "epsilon": to_jsonable(s.epsilon),
            "buffer_size": s.buffer_size,
            "trials": s.trials,
            "seed": seeds[s.key],
            "stop_at_target": s.stop_at_target,
            "seconds": secs_of[s.key],
            "submissions_run": int(np.sum(~np.isnan(zeta))),
            "fst": [
                metrics.fst_to_json(v) for v in np.atleast_1d(metrics.first_success_time(zeta))
            ],
        }
        if s in grid:
            results["settings"][s.key] = entry
        else:
            results.setdefault("figure2_runs", {})[s.key] = entry
    results["seconds_total"] = time.perf_counter() - t_all

    # Tables 1-3: metrics per grid setting against the eps = inf Laplace (|B| = 1) reference.
    ref_key = Setting("laplace", INF, PAPER_BUFFER["laplace"], cfg.trials).key
    ref_fst = (
        metrics.first_success_time(zetas[ref_key], metrics.TARGET_SCORE)
        if ref_key in zetas
        else None
    )
    results["reference"] = ref_key if ref_fst is not None else None
    for s, child in zip(grid, rng.spawn(len(grid)), strict=True):
        summary = metrics.summarize(
            zetas[s.key],
            horizon=cfg.max_submissions,
            reference_fst=ref_fst,
            rng=child,
            confidence=cfg.confidence,
            n_resamples=cfg.n_resamples,
        )
        summary.pop("fst")
        if s.key == ref_key:  # its curve over itself: 1 by definition, no interval
            summary["relative_auc_ci"] = [1.0, 1.0]
        results["settings"][s.key].update(summary)

    # Figure 2: mean mu_n curves at epsilon = 1, |B| in {1, 100}, both mechanisms (full runs).
    if cfg.figure2:
        for s in grid + extra:
            if s.epsilon == 1.0 and not s.stop_at_target:
                results["figure2"][s.key] = {
                    "mechanism": s.mechanism,
                    "buffer_size": s.buffer_size,
                    "trials": s.trials,
                    **_curve(zetas[s.key]),
                }
    # Figure 3: the success curves are steps at the FSTs, stored in settings[*]["fst"].
    return results
