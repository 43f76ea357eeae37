"""Issue 38, item 7 (the parts in the run-directory and CLI area): the user's own paths neither
lose evidence nor ignore what they were told."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_audit.accountant import Ledger
from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Laplace
from ldp_audit.run import open_run
from ldp_audit.rundir import verify_run


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"config": [("lr", 0.1), 3]}, "config must be a dict"),
        ({"config": "lr=0.1"}, "config must be a dict"),
        ({"private": [("name", "f")]}, "private must be a dict"),
        # a misspelt or unsupported key was dropped in silence before session 55 (the run then
        # recorded no env_id; an env_module given here was never used)
        (
            {"private": {"env": "MountainCar-v0", "name": "force", "values": [1.0, 2.0]}},
            r"private has no key 'env' \(its keys: env_id, name, values\)",
        ),
        (
            {"private": {"name": "f", "values": [1.0, 2.0], "env_module": "mypkg"}},
            "private has no key 'env_module'",
        ),
        ({"seed": "1"}, "seed must be an int"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"seed": True}, "seed must be an int"),
    ],
)
def test_open_run_refuses_wrong_types_by_name_and_leaves_nothing(
    kwargs: dict, match: str, tmp_path
) -> None:
    mech = Laplace(epsilon=1.0, clip=1.0)
    with pytest.raises(InvalidParameterError, match=match):
        open_run(tmp_path / "r", system="s", mechanism=mech, **kwargs)
    assert not (tmp_path / "r").exists()


def test_a_release_with_another_shape_is_refused_before_any_charge(tmp_path) -> None:
    run = open_run(tmp_path / "r", system="s", mechanism=Laplace(epsilon=1.0, clip=1.0))
    run.release(np.ones(3), agent=0, theta=np.zeros(3))
    with pytest.raises(InvalidParameterError, match="4 coordinates.*have 3"):
        run.release(np.ones(4), agent=1, theta=np.zeros(3))
    with pytest.raises(InvalidParameterError, match="values must be a real numeric array"):
        run.release(["a", "b", "c"], agent=1, theta=np.zeros(3))
    # a secret or score of the wrong type: '0.5' and True were taken as numbers, None was a raw
    # TypeError after the charge
    for kw in ({"secret": "0.5"}, {"secret": True}, {"score": "3"}, {"score": None}):
        with pytest.raises(InvalidParameterError, match="must be a real number"):
            run.release(np.ones(3), agent=1, theta=np.zeros(3), **kw)
    # a theta of another size or not numbers: charged, then close failed with numpy's "all
    # input arrays must have the same shape" and left the run without a manifest (session 53)
    with pytest.raises(InvalidParameterError, match="theta has 4 numbers, but this run's"):
        run.release(np.ones(3), agent=1, theta=np.zeros(4))
    with pytest.raises(InvalidParameterError, match="theta must be a real numeric array"):
        run.release(np.ones(3), agent=1, theta="abc")
    with Ledger(tmp_path / "r" / "ledger.sqlite", readonly=True) as led:
        assert len(led) == 1  # the refused releases were never charged
    path = run.close()  # closes cleanly: no raw numpy error, no run left "running"
    assert verify_run(path).ok and verify_run(path).status == "complete"
    assert np.load(path / "transcript.npz")["report"].shape == (1, 3)


@pytest.mark.parametrize(
    "flag",
    [
        ["--env-module", "json"],
        ["--simulator", "json:dumps"],
        ["--allow-unverified"],
        ["--expect-head", "0" * 64],
        ["--expect-root", "0" * 64],
    ],
)
def test_run_dir_options_without_run_dir_are_refused(flag: list[str], tmp_path, capsys) -> None:
    out = tmp_path / "a.json"
    argv = ["attack", "dynamics", "--agents", "2", "--shadow", "2", "--out", str(out), *flag]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert flag[0] in err and "only with --run-dir" in err
    assert not out.exists()
    argv = ["attack", "membership", "--out", str(out), *flag]
    if flag[0] in ("--allow-unverified", "--expect-head", "--expect-root"):
        assert main(argv) == 2
        assert "only with --run-dir" in capsys.readouterr().err


def test_a_sweep_never_writes_into_a_run(tmp_path, capsys) -> None:
    run = open_run(tmp_path / "r", system="s", mechanism=Laplace(epsilon=1.0, clip=1.0))
    run.release(np.ones(3), agent=0, theta=np.zeros(3))
    path = run.close()
    before = sorted(p.name for p in path.iterdir())
    assert main(["attack", "sweep", "--out", str(path), "--overwrite"]) == 2
    assert "is a run directory" in capsys.readouterr().err
    assert sorted(p.name for p in path.iterdir()) == before
    assert verify_run(path).ok


def test_a_sweep_interrupted_while_writing_leaves_no_half_report(
    tmp_path, capsys, monkeypatch
) -> None:
    """`attack sweep --out D` stopped (SIGTERM) once D/sweep.json appeared left it without
    sweep.png, and the same command then refused D ("already holds a report (sweep.json)").
    Now the interrupted write removes what it wrote: the rerun needs no --overwrite."""
    import ldp_audit.attacks.sweep as S

    out = tmp_path / "sw"
    argv = ["attack", "sweep", "--agents", "5", "--shadow", "20", "--train-submissions", "20",
            "--thetas", "init", "--out", str(out), "--no-progress"]  # fmt: skip

    def interrupted(doc, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "plot", interrupted)
    assert main(argv) == 130
    monkeypatch.undo()
    assert not any(out.iterdir())
    capsys.readouterr()
    assert main(argv) in (0, 1)
    assert sorted(p.name for p in out.iterdir()) == ["sweep.json", "sweep.png"]


def test_a_config_json_cannot_hold_is_refused_before_the_folder_is_made(tmp_path) -> None:
    """The one that left an empty run directory behind (and a raw TypeError)."""
    with pytest.raises(InvalidParameterError, match="must hold JSON values"):
        open_run(
            tmp_path / "r",
            system="s",
            mechanism=Laplace(epsilon=1.0, clip=1.0),
            config={"lr": object()},
        )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "--mechanism", "{mod}:M", "--samples", "1000"],
        [
            "audit",
            "--mechanism",
            "laplace",
            "--epsilon",
            "1",
            "--statistic",
            "{mod}:f",
            "--samples",
            "1000",
        ],
        [
            "train",
            "pgc-a3c",
            "--env",
            "Foo-v0",
            "--env-module",
            "{mod}",
            "--private-param",
            "a=1,2",
            "--mechanism",
            "none",
            "--out",
            "{tmp}/r",
        ],
    ],
)
@pytest.mark.parametrize("status", [0, None, 3])
def test_a_user_module_calling_sys_exit_at_import_is_exit_2_naming_it(
    argv: list[str], status: int | None, tmp_path, monkeypatch, capsys
) -> None:
    """A module given on the command line that calls ``sys.exit(0)`` at import made the CLI exit 0
    with no output and no run."""
    mod = f"quits_{status}_{abs(hash(tuple(argv))) % 10**8}"
    (tmp_path / f"{mod}.py").write_text(f"import sys\nsys.exit({status!r})\n")
    monkeypatch.chdir(tmp_path)
    code = main([a.format(mod=mod, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert mod in err and f"sys.exit({status!r})" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["train", "frd", "--private-param", "length=0.25,0.5", "--private-param", "length=1,2"],
            "--private-param given 2 times (--private-param length=0.25,0.5; --private-param "
            "length=1,2)",
        ),
        (
            ["train", "pgc-a3c", "--mechanism", "none", "--env", "Acrobot-v1", "--private-param",
             "LINK_MASS_1=0.5,1", "--private-param=LINK_MASS_1=1,2"],
            "--private-param given 2 times",
        ),
        (["audit", "--mechanism", "laplace", "--epsilon", "1", "--epsilon=2"], "--epsilon=2"),
        (["train", "frd", "--stop-at-mission", "--no-stop-at-mission"], "--stop-at-mission/"),
        (["report", "RUN", "-oA"], "-o/--out given 2 times (-oA; --out "),  # -oA: until s53
    ],
)  # fmt: skip
def test_a_repeated_option_is_refused_never_last_wins(
    argv: list[str], named: str, tmp_path, capsys
) -> None:
    """``--private-param`` given twice trained on the last one in silence (issue 38 item 7)."""
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(tmp_path / "r")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "give it once" in err
    assert not (tmp_path / "r").exists()


def test_options_meant_to_repeat_still_repeat(tmp_path, capsys) -> None:
    """``append`` options (``--statistic``, ``--param``, ``--set``) are not refused."""
    code = main(["audit", "--mechanism", "json:dumps", "--param", "a=1", "--param", "b=2"])
    assert code == 2 and "given 2 times" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "name", "values", "match"),
    [
        ("CartPole-v1", "length", [-0.5, 0.5], "'length' of CartPoleEnv is a physical constant: "
         "candidate -0.5 must be > 0"),
        ("CartPole-v1", "masspole", [0.0, 0.1], "candidate 0.0 must be > 0"),
        ("Acrobot-v1", "LINK_LENGTH_1", [-1, 1], "'LINK_LENGTH_1' of AcrobotEnv is a physical"),
        ("MountainCar-v0", "gravity", [5e-324, 0.0025], "candidate 5e-324 must be a normal double"),
        ("MountainCar-v0", "force", [-0.001, 0.001], "'force' of MountainCarEnv"),
    ],
)  # fmt: skip
def test_a_meaningless_physical_constant_is_refused_by_name(env, name, values, match) -> None:
    from ldp_audit.training.gym_envs import check_private_param

    with pytest.raises(InvalidParameterError, match=match):
        check_private_param(env, name, values)


def test_a_position_may_be_negative() -> None:
    """Only the classes' physical constants are signed: MountainCar's positions are not."""
    from ldp_audit.training.gym_envs import check_private_param

    _, vals = check_private_param("MountainCar-v0", "min_position", [-1.3, -1.2])
    assert vals == (-1.3, -1.2)


def test_a_subnormal_gravity_is_refused_by_each_cartpole_config() -> None:
    from ldp_audit.training.frd.config import FrdConfig
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    with pytest.raises(InvalidParameterError, match="candidate 5e-324 must be > 0 and a normal"):
        FrdConfig(private_param="gravity", private_values=(5e-324, 9.8))
    with pytest.raises(InvalidParameterError, match="candidate 1e-310 must be > 0 and a normal"):
        FrdConfig(private_param="length", private_values=(1e-310, 0.5))
    normal = r"must be a real number in \[2\.22507e-308, 1e\+30\], got "
    with pytest.raises(InvalidParameterError, match="gravities " + normal + "5e-324"):
        PgcA3cConfig(mechanism="none", gravities=(5e-324, 9.8))
    with pytest.raises(InvalidParameterError, match="agent_gravities " + normal + "1e-320"):
        PgcA3cConfig(mechanism="none", agent_gravities=(1e-320, 9.8))


CONSTANT_ENV = '''
import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class FrictionCartPole(CartPoleEnv):
    """``friction`` read in ``__init__`` only (a constant computed from it), or in ``step``."""

    def __init__(self, render_mode=None, in_step=False, global_noise=False):
        super().__init__(render_mode=render_mode)
        self.friction = 0.1
        self.in_step, self.global_noise = in_step, global_noise
        self.damping = 1.0 - self.friction  # the common pattern: a later change is ignored

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        damping = 1.0 - self.friction if self.in_step else self.damping
        self.state = (self.state[0], self.state[1] * damping, self.state[2], self.state[3])
        if self.global_noise:  # numpy's global generator, not the seeded self.np_random
            obs = obs + np.random.normal(0.0, 1e-3, obs.shape).astype(obs.dtype)
        return obs, r, term, trunc, info


for _id, _kw in (("ConstFriction-v0", {}), ("StepFriction-v0", {"in_step": True}),
                 ("NoisyConstFriction-v0", {"global_noise": True})):
    if _id not in gym.registry:
        gym.register(_id, entry_point=f"{__name__}:FrictionCartPole", kwargs=_kw,
                     max_episode_steps=100)
'''


def test_a_private_parameter_with_no_effect_is_refused(tmp_path, monkeypatch, capsys) -> None:
    """Every candidate gave identical trajectories and the attack reported chance: a researcher
    read "does not leak" from an experiment that never varied the parameter (issue 38 item 7)."""
    from ldp_audit.training.gym_envs import check_private_param

    (tmp_path / "friction_envs.py").write_text(CONSTANT_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidParameterError, match=r"'friction' has no effect on env "):
        check_private_param("ConstFriction-v0", "friction", [0.0, 0.5], env_module="friction_envs")
    _, vals = check_private_param("StepFriction-v0", "friction", [0.0, 0.5])
    assert vals == (0.0, 0.5)  # the same env reading it in step(): accepted
    run = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--env-module", "friction_envs", "--env", "ConstFriction-v0",
            "--private-param", "friction=0,0.5", "--mechanism", "none", "--max-submissions", "4",
            "--out", str(run)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "'friction' has no effect" in err and "__init__" in err and "[0.0, 0.5]" in err
    assert not run.exists()


def test_an_env_not_reproducible_from_its_seed_is_refused(tmp_path, monkeypatch) -> None:
    """Noise from numpy's global generator made every candidate's trace differ, so a parameter
    the env never reads passed the no-effect check (and the attack then reported chance)."""
    from ldp_audit.training.gym_envs import check_private_param

    (tmp_path / "friction_envs.py").write_text(CONSTANT_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidParameterError, match=r"not reproducible.*self\.np_random"):
        check_private_param("NoisyConstFriction-v0", "friction", [0.0, 0.5],
                            env_module="friction_envs")  # fmt: skip


@pytest.mark.parametrize(
    ("env", "name", "values"),
    [
        ("MountainCar-v0", "goal_position", [0.4, 0.5]),
        ("MountainCar-v0", "max_position", [0.5, 0.6]),
    ],
)
def test_a_parameter_acting_only_near_the_goal_is_seen(env, name, values) -> None:
    """The longer probe reaches MountainCar's goal (it pushes by the sign of the velocity), so
    parameters that act only there are not refused as having no effect."""
    from ldp_audit.training.gym_envs import check_private_param

    assert check_private_param(env, name, values)[1] == tuple(values)


def test_a_cap_never_reached_has_no_effect() -> None:
    """MountainCar's speed cap 0.07 vs 0.08: no reachable speed differs (the default is 0.07)."""
    from ldp_audit.training.gym_envs import check_private_param

    with pytest.raises(InvalidParameterError, match="'max_speed' has no effect"):
        check_private_param("MountainCar-v0", "max_speed", [0.07, 0.08])


def test_a_value_json_cannot_hold_is_named_by_its_key(tmp_path) -> None:
    """A plug-in config's set default read 'got Object of type set is not JSON serializable',
    naming no field (session 52)."""
    key = r"config\['params'\]\['arms'\]: Object of type set"  # open_run nests the user's config
    with pytest.raises(InvalidParameterError, match=key):
        open_run(tmp_path / "r", system="s", mechanism=Laplace(epsilon=1.0, clip=1.0),
                 config={"lr": 0.1, "arms": {1, 2}})  # fmt: skip
    assert not (tmp_path / "r").exists()


class _GradTensor:
    """What numpy sees of a torch tensor that requires grad (torch not imported: 3 s here):
    ``__array__`` raises torch's RuntimeError, ``detach().cpu().numpy()`` gives the values,
    ``item()`` a 0-d one's Python number."""

    def __init__(self, a, dtype=np.float32) -> None:
        self.a = np.asarray(a, dtype=dtype)
        self.ndim = self.a.ndim

    def item(self):
        return self.a.item()

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad.")

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a


def test_a_release_refuses_what_numpy_would_coerce_before_any_charge(tmp_path) -> None:
    """Session 54 probe: ``run.release`` cast with ``np.asarray(dtype=float64)``, so a report of
    numeric strings was released as numbers, a complex one lost its imaginary part (a
    ComplexWarning, then released), a NaN theta was recorded, and a torch tensor that requires
    grad (a loss's gradient, a model's parameters) raised torch's raw ``RuntimeError``."""
    run = open_run(tmp_path / "r", system="s", mechanism=Laplace(epsilon=1.0, clip=1.0))
    run.release(_GradTensor([0.1, 0.1, 0.1]), agent=0, theta=_GradTensor([0, 0, 0]))
    bad = [
        ({"values": ["1", "2", "3"]}, "values must be a real numeric array, got dtype <U1"),
        ({"values": np.ones(3) + 1j}, "values must be a real numeric array, got dtype complex"),
        ({"theta": np.array([0.0, np.nan, 0.0])}, "theta must be finite; found nan at index 1"),
        ({"theta": ["0", "0", "0"]}, "theta must be a real numeric array, got dtype <U1"),
    ]
    for kw, match in bad:
        args = {"values": np.ones(3), "theta": np.zeros(3), **kw}
        with pytest.raises(InvalidParameterError, match=match):
            run.release(args.pop("values"), agent=1, **args)
    with Ledger(tmp_path / "r" / "ledger.sqlite", readonly=True) as led:
        assert len(led) == 1  # only the tensor's release was charged
    path = run.close()
    assert verify_run(path).ok
    assert np.load(path / "transcript.npz")["thetas"].tolist() == [[0.0, 0.0, 0.0]]


def test_a_release_takes_the_scalar_score_a_loop_holds(tmp_path) -> None:
    """Session 58: ``run.release(score=<0-d torch tensor>)`` (a return summed in torch, a loss)
    was refused, "score must be a real number, got tensor(1.5)". A 0-d real tensor (one that
    requires grad too), a 0-d array and a NumPy scalar are numbers; a bool, a string, a vector
    and an infinite score (NaN is "not given") are refused before the charge."""
    run = open_run(tmp_path / "r", system="s", mechanism=Laplace(epsilon=1.0, clip=1.0))
    good = [_GradTensor(1.5), _GradTensor(-2, dtype=np.int64), np.array(0.5), np.float32(0.25)]
    for agent, score in enumerate(good):
        run.release(np.ones(3), agent=agent, theta=np.zeros(3), score=score)
    bad = [
        (_GradTensor(True, dtype=bool), "score must be a real number, got"),
        ("1.5", "score must be a real number, got '1.5'"),
        (_GradTensor([1.5]), "score must be a real number, got"),
        (np.float64(np.inf), r"score must be finite \(or NaN: not given\), got inf"),
        (-np.inf, r"score must be finite \(or NaN: not given\), got -inf"),
    ]
    for score, match in bad:
        with pytest.raises(InvalidParameterError, match=match):
            run.release(np.ones(3), agent=9, theta=np.zeros(3), score=score)
    with Ledger(tmp_path / "r" / "ledger.sqlite", readonly=True) as led:
        assert len(led) == len(good)  # nothing refused was charged
    path = run.close()
    assert np.load(path / "transcript.npz")["score"].tolist() == [1.5, -2.0, 0.5, 0.25]


def test_an_own_loop_budget_is_spent_as_its_mechanism_composes(tmp_path) -> None:
    """Session 54 probe: ``open_run(mechanism=Gaussian(...), budget=8)`` refused its first
    release (``method 'basic' does not support this history ... use method='best'``, an option
    open_run does not have). A budget is now spent as the mechanism composes: RDP at a
    Gaussian's delta (as a Flower client's), sequentially for pure epsilon (no charge here: the
    first RDP charge imports Opacus, 9 s; the slow test below releases)."""
    from ldp_audit.accountant import Budget
    from ldp_audit.mechanisms import Gaussian

    g = Gaussian(clip=1.0, noise_multiplier=2.0)
    for mech, want in (
        (g, Budget(8.0, delta=1e-5, method="rdp")),
        (Laplace(epsilon=1.0, clip=1.0), Budget(8.0)),
    ):
        run = open_run(tmp_path / type(mech).__name__, system="s", mechanism=mech, budget=8.0)
        assert run.accountant.budget == want
        run.close()


@pytest.mark.slow
def test_a_gaussian_own_loop_with_a_budget_releases_until_it_is_spent(tmp_path) -> None:
    """The release side of the test above (13 s alone, Opacus's import): two releases at 4.38
    pass and the third is refused, not the first."""
    from ldp_audit.errors import BudgetExceeded
    from ldp_audit.mechanisms import Gaussian

    run = open_run(tmp_path / "r", system="s", mechanism=Gaussian(clip=1.0, noise_multiplier=2.0),
                   budget=8.0)  # fmt: skip
    for _ in range(2):
        run.release(np.full(3, 0.1), agent=0, theta=np.zeros(3))
    with pytest.raises(
        BudgetExceeded, match=r"would spend epsilon 9\.0.*method='rdp'.* > budget 8"
    ):
        run.release(np.full(3, 0.1), agent=0, theta=np.zeros(3))
    assert verify_run(run.close()).ok
