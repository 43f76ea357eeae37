"""Dynamics-inference attack: known-ceiling mechanism, eps = inf recovery, estimator API."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldp_audit.attacks import dynamics_experiment as E
from ldp_audit.attacks.dynamics_experiment import craft_theta, linear_controller_theta
from ldp_audit.attacks.dynamics_run_dir import attack_run_dir, score_run_dir
from ldp_audit.attacks.dynamics_shadow import GRAVITIES, ShadowGradientAttack, simulate_shadow
from ldp_audit.attacks.scoring import accuracy_ceiling
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.mechanisms import Laplace, NoPrivacy, RandomizedResponse

CANDS = np.array(GRAVITIES)


def index_simulator(theta, gravity, rng, alpha=0.0):
    """A 'world' whose gradient is the gravity's index: RR of it has a known, tight ceiling."""
    idx = np.searchsorted(CANDS, np.asarray(gravity)).astype(np.float64)[:, None]
    return idx, np.zeros(idx.shape[0])


class DoubledRR(RandomizedResponse):
    """Broken on purpose: claims epsilon but randomises at 3 * epsilon."""

    def privatize(self, x, rng):
        return RandomizedResponse(epsilon=3 * self.epsilon, k=self.k).privatize(x, rng)


# 6 binomial checks below share alpha = 1e-6 (Bonferroni: 1e-6 / 6 per check, two-sided).
ALPHA = 1e-6 / 6


def cp(correct: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    lo = stats.beta.ppf(alpha / 2, correct, n - correct + 1) if correct else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, correct + 1, n - correct) if correct < n else 1.0
    return lo, hi


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_rr_single_report_reaches_ceiling_and_never_exceeds(eps: float) -> None:
    # For k-ary RR of the true index the ML guess (the report itself) is exactly at the ceiling
    # e^eps / (e^eps + k - 1): the ceiling must lie in the attack's CP interval (false-failure
    # probability <= 1e-6 / 6 per parameter, Clopper-Pearson is exact-conservative).
    mech = RandomizedResponse(epsilon=eps, k=3)
    r = E.run(
        mech,
        theta=np.zeros(1),
        n_agents=20_000,
        n_shadow=5,
        simulator=index_simulator,
        seed=11,
    )
    lo, hi = cp(r.correct, r.n)
    assert r.extra["method"] == "likelihood"
    assert r.ceiling == pytest.approx(accuracy_ceiling(eps, 3))
    assert lo <= r.ceiling <= hi
    assert not r.violation


@pytest.mark.parametrize("T", [3, 5])
def test_rr_many_reports_never_exceed_composed_ceiling(T: int) -> None:
    # With T reports the composed ceiling e^{T eps}/(e^{T eps}+2) is an upper bound (not tight):
    # the CP lower limit at 1e-6/6 must not exceed it, and the attack must still gain from T.
    eps = 0.3
    mech = RandomizedResponse(epsilon=eps, k=3)
    r = E.run(
        mech,
        theta=np.zeros(1),
        n_agents=20_000,
        reports_per_agent=T,
        n_shadow=5,
        simulator=index_simulator,
        seed=12,
    )
    lo, hi = cp(r.correct, r.n)
    assert lo <= r.ceiling
    assert r.composed_epsilon == pytest.approx(T * eps)
    # and the attack is Bayes-optimal: its accuracy matches the exact MAP accuracy
    # (1/k) sum_y max_g P(y | g), enumerated over all 3^T report sequences.
    import itertools

    keep = math.exp(eps) / (math.exp(eps) + 2)
    bayes = 0.0
    for ys in itertools.product(range(3), repeat=T):
        lik = [math.prod(keep if y == g else (1 - keep) / 2 for y in ys) for g in range(3)]
        bayes += max(lik) / 3
    assert lo <= bayes <= hi
    assert bayes > accuracy_ceiling(eps, 3)  # more reports help


def test_broken_mechanism_is_flagged() -> None:
    # RR at 3 * eps while claiming eps: the attack exceeds the claimed ceiling beyond its
    # interval. At eps = 0.5, n = 20,000 the true accuracy 0.69 vs ceiling 0.45 is ~70 standard
    # errors away, so a missed flag has probability far below 1e-6.
    mech = DoubledRR(epsilon=0.5, k=3)
    r = E.run(
        mech,
        theta=np.zeros(1),
        n_agents=20_000,
        n_shadow=5,
        simulator=index_simulator,
        seed=13,
        confidence=1 - 1e-6,
        method="classifier",
        classifier=None,
    )
    assert r.violation
    assert r.epsilon_lower_bound > 0.5


def test_eps_inf_recovers_gravity_far_above_chance() -> None:
    # Small setup with the real public simulator: two well-separated gravities (7.0 vs 12.0),
    # random initial theta, 10 reports per agent, no privacy. Measured: 198/200 correct
    # (0.99; chance 0.5) with seed 0. If the attack's true accuracy is >= 0.95, P(correct < 150)
    # is < 1e-20 (binomial tail), so the bound below fails only if the attack is broken.
    from ldp_audit.training.pgc_a3c.model import init_theta

    theta = init_theta(np.random.default_rng(0))
    r = E.run(
        NoPrivacy(),
        theta=theta,
        candidates=(7.0, 12.0),
        n_agents=200,
        reports_per_agent=10,
        n_shadow=300,
        seed=0,
    )
    assert r.correct >= 150
    assert r.epsilon_lower_bound > 1.0
    assert r.ceiling == 1.0 and not r.violation


def test_laplace_likelihood_on_separable_world() -> None:
    # A deterministic world whose clean gradient differs by gravity: at large eps the exact
    # Laplace likelihood attack is near perfect, and never beyond its ceiling.
    def sim(theta, gravity, rng, alpha=0.0):
        g = np.asarray(gravity)
        x = np.zeros((g.size, 4))
        x[:, 0] = (g - 9.8) * 0.02  # +-0.002 in L1, within the clip C/2 = 0.005
        x[:, 1] = rng.uniform(-1e-4, 1e-4, size=g.size)
        return x, np.zeros(g.size)

    mech = Laplace(epsilon=20.0, clip=0.01)
    r = E.run(mech, theta=np.zeros(1), n_agents=3000, n_shadow=50, simulator=sim, seed=3)
    assert r.extra["method"] == "likelihood"
    # b = C/eps = 5e-4 vs separation 2e-3: the Bayes accuracy is ~0.94; bound 0.85 is > 10 SE
    # below it (false failure << 1e-6), and the ceiling at eps = 20 is ~1.
    assert r.accuracy > 0.85
    assert not r.violation


def test_estimator_api() -> None:
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    rng = np.random.default_rng(5)
    X = np.repeat(np.arange(3.0), 50)[:, None]
    y = CANDS[np.repeat(np.arange(3), 50)]
    est = ShadowGradientAttack(RandomizedResponse(epsilon=1.0, k=3))
    with pytest.raises(NotFittedError):
        est.predict(X)
    assert est.fit(X, y) is est
    assert est.method_ == "likelihood"
    np.testing.assert_array_equal(est.classes_, CANDS)
    p = est.predict_proba(np.array([[0.0], [2.0]]))
    assert p.shape == (2, 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    q = math.exp(1) / (math.exp(1) + 2)
    assert p[0, 0] == pytest.approx(q)
    np.testing.assert_array_equal(est.predict(np.array([[1.0]])), [9.8])
    ids, guess, post = est.predict_groups(np.array([[0.0], [0.0], [2.0]]), np.array([7, 7, 9]))
    np.testing.assert_array_equal(ids, [7, 9])
    np.testing.assert_array_equal(guess, [9.7, 9.9])
    assert clone(est).get_params()["method"] == "auto"
    # classifier method on a mechanism with noise
    est2 = ShadowGradientAttack(
        RandomizedResponse(epsilon=1.0, k=3), method="classifier", random_state=rng
    ).fit(X, y)
    assert est2.method_ == "classifier" and hasattr(est2, "classifier_")
    assert 0.0 <= est2.score(X, y) <= 1.0
    with pytest.raises(InvalidParameterError, match="method"):
        ShadowGradientAttack(None, method="bogus").fit(X, y)
    with pytest.raises(InvalidParameterError, match="likelihood"):
        ShadowGradientAttack(NoPrivacy(), method="likelihood").fit(X, y)


def test_validation() -> None:
    with pytest.raises(InvalidParameterError, match="candidates"):
        E.run(None, theta=np.zeros(1), candidates=(9.8,), simulator=index_simulator, seed=0)
    with pytest.raises(InvalidParameterError, match="reports_per_agent"):
        E.run(None, theta=np.zeros(1), reports_per_agent=0, simulator=index_simulator, seed=0)
    with pytest.raises(InvalidParameterError, match="rng"):
        simulate_shadow(np.zeros(1), [9.8], rng=0, simulator=index_simulator)
    with pytest.raises(InvalidParameterError, match="weights"):
        linear_controller_theta([1.0, 2.0])


def test_run_dir_attack_reads_no_secrets(tmp_path) -> None:
    from ldp_audit.attacks.membership import FixedThetaTrainer

    mech = RandomizedResponse(epsilon=2.0, k=3)
    rng = np.random.default_rng(8)
    gravities = rng.choice(CANDS, size=500)
    FixedThetaTrainer(
        theta=np.zeros(1), mechanism=mech, reports_per_agent=2, simulator=index_simulator
    )(gravities, tmp_path, rng)
    secrets = (tmp_path / "secrets.npz").read_bytes()
    (tmp_path / "secrets.npz").unlink()
    with pytest.raises(InvalidParameterError, match="method must be .*got 'bogus'"):
        attack_run_dir(tmp_path, method="bogus", simulator=index_simulator)  # not a classifier
    pred = attack_run_dir(tmp_path, n_shadow=5, max_groups=None, simulator=index_simulator)
    assert "gravity" not in pred and pred["guess"].shape == (500,)
    with pytest.raises(RunDirectoryError, match="secrets"):
        score_run_dir(tmp_path, pred)
    (tmp_path / "secrets.npz").write_bytes(secrets)
    res = score_run_dir(tmp_path, pred)
    assert res.reports_per_agent == 2 and res.n == 500
    assert res.mechanism["name"] == "randomized_response"
    # two RR reports at eps=2: accuracy well above chance, below the composed ceiling.
    # true accuracy ~0.80; the bound 0.7 is ~5.6 SE below (false failure < 1e-7).
    assert 0.7 < res.accuracy
    assert not res.violation
    # a guess is right only when it is the exact candidate: one 1e-9 off (np.isclose's rtol
    # 1e-5 took 9.8 for 9.800000001, a CartPole run read accuracy 1.000) is wrong
    off = dict(pred, guess=pred["guess"] * (1 + 1e-9))
    assert score_run_dir(tmp_path, off).accuracy == 0.0


def _linear_world(theta, gravity, rng, alpha=0.0):
    """Fake simulator: the 'gradient' reveals gravity plus episode noise (sd 0.05)."""
    g = np.asarray(gravity, dtype=np.float64)
    x = np.stack([g - 9.8 + rng.normal(0, 0.05, size=g.size), rng.normal(size=g.size)], axis=1)
    return x, np.zeros(g.size)


def test_continuous_variant_beats_the_prior_mean() -> None:
    # Gravity ~ U[9.5, 10.1]; the attack's posterior mean must beat always answering 9.8
    # (baseline MAE 0.15). With per-report noise sd 0.05 and 4 reports the attack's MAE is
    # ~0.03; its standard error over 300 agents is < 0.003, so 0.08 is > 15 SE away.
    r = E.run_continuous(
        Laplace(epsilon=50.0, clip=2.0),
        theta=np.zeros(1),
        n_agents=300,
        reports_per_agent=4,
        n_shadow=200,
        simulator=_linear_world,
        seed=4,
    )
    assert r.mae_baseline == pytest.approx(0.15)
    assert r.mae < 0.08
    assert r.extra["method"] == "likelihood"


def test_craft_theta_picks_the_most_revealing_design() -> None:
    # A fake world in which only theta == extra design reveals gravity: the search must pick it.
    special = np.full(112, 0.5)

    def sim(theta, gravity, rng, alpha=0.0):
        g = np.asarray(gravity, dtype=np.float64)
        reveal = np.all(np.asarray(theta) == 0.5, axis=1).astype(np.float64)
        x = np.stack([reveal * (g - 9.8) * 100 + rng.normal(size=g.size)] * 2, axis=1)
        return x, np.zeros(g.size)

    theta, info = craft_theta(
        n_probe=60, n_designs=6, simulator=sim, seed=0, extra_designs=[special]
    )
    np.testing.assert_array_equal(theta, special)
    assert info["chosen"] == "extra0"
    # gravity separation 10 sd: the chosen design's probe accuracy is ~1 (> 0.9 fails only if
    # more than 9 of 90 test episodes are misclassified, probability < 1e-6)
    assert info["probe_accuracy"]["extra0"] > 0.9


@pytest.mark.parametrize("per_class", [1, 13])
def test_too_few_non_private_shadows_are_refused_naming_the_option(per_class) -> None:
    """The non-private classifier (gradient boosting, leaves of >= 20) cannot split fewer than
    40 shadows: before, every posterior was silently flat (1/3 each, AUC 0.5); now refused
    naming --shadow and the minimum per candidate (ceil(40 / 3) = 14). 14 per class is fit,
    and its posterior on this separable world is no longer flat."""
    X = np.repeat(np.arange(3.0), per_class)[:, None] + 0.01 * np.arange(3 * per_class)[:, None]
    y = CANDS[np.repeat(np.arange(3), per_class)]
    with pytest.raises(InvalidParameterError, match=r"--shadow.*>= 14"):
        ShadowGradientAttack(None).fit(X, y)
    X14 = np.repeat(np.arange(3.0), 14)[:, None] + 0.01 * np.arange(42)[:, None]
    est = ShadowGradientAttack(None).fit(X14, CANDS[np.repeat(np.arange(3), 14)])
    assert np.ptp(est.predict_proba(np.array([[0.0], [2.0]])), axis=1).min() > 0.1


@pytest.mark.parametrize("mechanism", [None, NoPrivacy()])
def test_identical_shadows_are_a_clear_error(mechanism) -> None:
    """All-zero shadow gradients (theta = 0) carry no information: a clear error saying so
    (before: sklearn's raw 'No feature in X meets the variance threshold' ValueError)."""
    y = CANDS[np.repeat(np.arange(3), 20)]
    with pytest.raises(InvalidParameterError, match="identical.*no information"):
        ShadowGradientAttack(mechanism, method="classifier").fit(np.zeros((60, 5)), y)


def test_cli_run_dir_attack_refuses_too_few_shadows(tmp_path, capsys) -> None:
    """A 20-submission non-private PGC-A3C run (9 distinct thetas): --shadow 1 gives 9 shadows
    per candidate, 27 in all: exit 2 naming --shadow (before: exit 0, accuracy at chance)."""
    from ldp_audit.cli import main

    run = str(tmp_path / "run")
    argv = ["train", "pgc-a3c", "--mechanism", "none", "--max-submissions", "20"]
    assert main([*argv, "--no-progress", "--out", run]) == 0
    assert main(["attack", "dynamics", "--run-dir", run, "--shadow", "1"]) == 2
    assert "--shadow" in capsys.readouterr().err


def test_run_dir_shadows_over_the_memory_limit_are_refused_before_any_simulation(
    tmp_path, capsys, monkeypatch
) -> None:
    """Session 55 probe: `attack dynamics --run-dir RUN --shadow 1000000` on a MountainCar run was
    accepted with no estimate (5.2 GB held after 60 s) although docs/cli.md says shadow counts
    are checked. The shadows held at once (k x n_shadow reports, per theta or for all thetas)
    are now checked against the memory limit first: Python names n_shadow and force=True, the
    CLI --shadow and --force, and nothing is simulated or written."""
    from ldp_audit.attacks.membership import FixedThetaTrainer
    from ldp_audit.cli import main

    run = str(tmp_path / "run")
    argv = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1", "--max-submissions"]
    assert main([*argv, "20", "--no-progress", "--out", run]) == 0
    monkeypatch.setenv("LDP_AUDIT_MEMORY_LIMIT", "1M")  # the training's own estimate is above
    rng = np.random.default_rng(8)
    FixedThetaTrainer(theta=np.zeros(1), mechanism=RandomizedResponse(epsilon=2.0, k=3),
                      reports_per_agent=2, simulator=index_simulator,
                      )(rng.choice(np.array(GRAVITIES), size=12), tmp_path / "ft", rng)  # fmt: skip
    calls = []

    def counting(theta, gravity, rng, alpha=0.0):
        calls.append(len(gravity))
        return index_simulator(theta, gravity, rng, alpha)

    # 3 candidates x 10,000 shadows x 1 value x 40 bytes: 1.2 MB > 1 MiB
    with pytest.raises(InvalidParameterError, match=r"^n_shadow=10000 needs about .*force=True"):
        attack_run_dir(tmp_path / "ft", n_shadow=10_000, simulator=counting)
    assert calls == []
    attack_run_dir(tmp_path / "ft", n_shadow=10_000, simulator=counting, force=True)
    assert sum(calls) == 30_000
    capsys.readouterr()
    assert main(["attack", "dynamics", "--run-dir", run, "--shadow", "2000"]) == 2
    err = capsys.readouterr().err
    assert "--shadow 2000 needs about" in err and "pass --force" in err and "n_shadow" not in err
    assert not (tmp_path / "run" / "attack_dynamics.json").exists()


def test_a_run_with_planted_gravities_is_not_scored_against_the_uniform_ceiling(tmp_path) -> None:
    # s53-attackprobe: a PGC-A3C run whose agents all had gravity 9.8 (agent_gravities) was
    # scored "chance=0.333" against e^eps/(e^eps+2), which always guessing 9.8 (accuracy 1.0)
    # beats: refused before the attack, and by the scorer itself
    from ldp_audit.attacks.run_scorers import pgc_dynamics
    from ldp_audit.training.pgc_a3c import PgcA3cConfig
    from ldp_audit.training.pgc_a3c.grid import train

    cfg = PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=2, max_submissions=20,
                       agent_gravities=(9.8,) * 30)  # fmt: skip
    train(cfg, seed=7, run_dir=tmp_path, progress=False)
    with pytest.raises(InvalidParameterError, match="agent_gravities fixes 30 agents"):
        pgc_dynamics(tmp_path, n_shadow=20)
    pred = {"rows": np.arange(2), "group_of_row": np.arange(2), "guess": np.full(2, 9.8)}
    with pytest.raises(InvalidParameterError, match="ceiling e\\^eps/\\(e\\^eps\\+k-1\\)"):
        score_run_dir(tmp_path, pred)
