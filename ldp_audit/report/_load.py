"""Load and validate a run directory (layout in docs/interfaces.md, "Run directory").

Every file is checked before anything is rendered: a missing required file or a malformed one
raises :class:`~ldp_audit.errors.RunDirectoryError` naming the file and what is wrong, so a
report is never silently incomplete. Optional parts (``audit.json``, ``attack_*.json``,
``secrets.npz``) are recorded as absent and the report says "not run" for them.

Any algorithm's run loads: ``config.json``, ``ledger.sqlite`` and ``metrics.json`` are required
of every run (the run-directory contract); PGC-A3C runs (``"algorithm": "pgc-a3c"``) also need
``transcript.npz`` and ``model.npz`` in the layout of docs/interfaces.md. Audits and attacks
written elsewhere (an audit's ``--json`` output, an attack's ``--out``) are read from the
``extra`` folders or files.
"""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import RunDirectoryError

__all__ = [
    "RunData",
    "load_run",
    "REQUIRED_FILES",
    "COMMON_REQUIRED_FILES",
    "OPTIONAL_FILES",
    "PGC_ALGORITHM",
]

#: The algorithm whose run layout (transcript, model, zeta metrics) the report knows natively.
PGC_ALGORITHM = "pgc-a3c"
#: Files every run of any algorithm has (the run-directory contract).
COMMON_REQUIRED_FILES = ("config.json", "ledger.sqlite", "metrics.json")
#: Files a PGC-A3C run has; the report cannot be built without them.
REQUIRED_FILES = ("config.json", "ledger.sqlite", "transcript.npz", "metrics.json", "model.npz")
#: Files a report uses when present and reports as "not run" / "absent" otherwise.
OPTIONAL_FILES = ("secrets.npz", "audit.json", "attack_*.json")

_TRANSCRIPT_INT = ("trial", "agent", "submission", "theta_index")


@dataclass(frozen=True)
class RunData:
    """Everything a run directory holds, validated.

    Attributes:
        path: the run directory.
        config: the parsed ``config.json`` (keys ``algorithm``, ``config``, ``mechanism``,
            ``seed``, ``versions``, ``created``).
        ledger_path: path of ``ledger.sqlite``.
        transcript: arrays of ``transcript.npz`` (``trial``, ``agent``, ``submission``,
            ``theta_index``, ``report``, ``score``, ``thetas``).
        metrics: the parsed ``metrics.json``.
        model_theta: ``model.npz``'s ``theta``, shape (K, d).
        secrets: ``secrets.npz`` arrays, or None when absent.
        audits: the entries of ``audit.json``, or None when the audit was not run.
        attacks: ``{name: dict}`` from ``attack_<name>.json`` (empty when none was run).
    """

    path: Path
    config: dict[str, Any]
    ledger_path: Path
    transcript: dict[str, np.ndarray]
    metrics: dict[str, Any]
    model_theta: np.ndarray
    secrets: dict[str, np.ndarray] | None = None
    audits: list[dict[str, Any]] | None = None
    attacks: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: tuple[Path, ...] = ()
    """Folders or files of analysis outputs written outside the run (read for audits/attacks)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Where each audit/attack came from: ``{"audit.json": path, "attack_<name>": path}``."""

    @property
    def algorithm(self) -> str:
        """config.json's ``algorithm``."""
        return str(self.config["algorithm"])

    @property
    def is_pgc(self) -> bool:
        """Whether this is a PGC-A3C run (transcript and learning curves read natively)."""
        return self.algorithm == PGC_ALGORITHM and bool(self.transcript)

    @property
    def n_submissions(self) -> int:
        """N, the number of transcript rows (0 when the transcript is not in the PGC layout)."""
        if not self.transcript or "trial" not in self.transcript:
            return 0
        return int(self.transcript["trial"].shape[0])

    @property
    def dim(self) -> int:
        """d, the dimension of a report (0 when unknown)."""
        if not self.transcript or "report" not in self.transcript:
            return 0
        return int(self.transcript["report"].shape[1])


def _err(path: Path, what: str) -> RunDirectoryError:
    return RunDirectoryError(f"{path}: {what}")


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _err(path, f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise _err(path, "is not UTF-8 text") from None
    try:
        # NaN/Infinity are accepted: metrics legitimately hold an infinite FST.
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _err(path, f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise _err(path, f"is not a readable .npz archive ({exc})") from None


def _check_config(path: Path, cfg: Any) -> dict[str, Any]:
    if not isinstance(cfg, dict):
        raise _err(path, f"must hold a JSON object, got {type(cfg).__name__}")
    missing = [k for k in ("algorithm", "config", "seed") if k not in cfg]
    if missing:
        raise _err(path, f"missing key(s) {', '.join(missing)}")
    if not isinstance(cfg["algorithm"], str):
        raise _err(path, f"'algorithm' must be a string, got {cfg['algorithm']!r}")
    if not isinstance(cfg["config"], dict):
        raise _err(path, f"'config' must be an object, got {type(cfg['config']).__name__}")
    pgc = cfg["algorithm"] == PGC_ALGORITHM
    if pgc and "mechanism" not in cfg:
        raise _err(path, "missing key(s) mechanism")
    mech = cfg.get("mechanism")
    # other algorithms may have several mechanisms (RunWriter writes null then)
    if (mech is not None or pgc) and (
        not isinstance(mech, dict) or not isinstance(mech.get("name"), str)
    ):
        raise _err(path, f"'mechanism' must be an object with a string 'name', got {mech!r}")
    seed = cfg["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _err(path, f"'seed' must be an integer, got {seed!r}")
    for key in ("versions",):
        if key in cfg and not isinstance(cfg[key], dict):
            raise _err(path, f"'{key}' must be an object, got {type(cfg[key]).__name__}")
    return cfg


def _check_transcript(path: Path, tr: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    need = (*_TRANSCRIPT_INT, "report", "score", "thetas")
    missing = [k for k in need if k not in tr]
    if missing:
        raise _err(path, f"missing array(s) {', '.join(missing)}")
    n = tr["trial"].shape[0] if tr["trial"].ndim == 1 else -1
    for k in _TRANSCRIPT_INT:
        a = tr[k]
        if a.ndim != 1 or a.shape[0] != n or not np.issubdtype(a.dtype, np.integer):
            raise _err(
                path, f"'{k}' must be a 1-D integer array of length N={n}, got {a.dtype} {a.shape}"
            )
    rep, thetas, score = tr["report"], tr["thetas"], tr["score"]
    if rep.ndim != 2 or rep.shape[0] != n or not np.issubdtype(rep.dtype, np.floating):
        raise _err(
            path, f"'report' must be a float array of shape (N={n}, d), got {rep.dtype} {rep.shape}"
        )
    if score.ndim != 1 or score.shape[0] != n:
        raise _err(path, f"'score' must have shape (N={n},), got {score.shape}")
    if thetas.ndim != 2 or thetas.shape[1] != rep.shape[1]:
        raise _err(path, f"'thetas' must have shape (V, d={rep.shape[1]}), got {thetas.shape}")
    if n and (tr["theta_index"].min() < 0 or tr["theta_index"].max() >= thetas.shape[0]):
        raise _err(
            path,
            f"'theta_index' must index rows of 'thetas' (0..{thetas.shape[0] - 1}), "
            f"got range {tr['theta_index'].min()}..{tr['theta_index'].max()}",
        )
    if n and (tr["trial"].min() < 0 or tr["agent"].min() < 0):
        raise _err(path, "'trial' and 'agent' must be >= 0")
    return tr


def _check_metrics(path: Path, m: Any, *, pgc: bool = True) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise _err(path, f"must hold a JSON object, got {type(m).__name__}")
    if not pgc:
        return m
    if "zeta" not in m:
        raise _err(path, "missing key 'zeta' (the per-submission scores, one list per trial)")
    zeta = m["zeta"]
    if not isinstance(zeta, list) or not all(isinstance(z, list) for z in zeta):
        raise _err(path, "'zeta' must be a list (one per trial) of lists of scores")
    for i, z in enumerate(zeta):
        for v in z:
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise _err(path, f"'zeta'[{i}] must hold numbers, got {v!r}")
    return m


def _check_audits(path: Path, a: Any) -> list[dict[str, Any]]:
    if not isinstance(a, list) or not all(isinstance(e, dict) for e in a):
        raise _err(path, "must hold a JSON list of AuditResult.to_dict() objects")
    for i, e in enumerate(a):
        for k in ("epsilon_lower_bound", "claimed_epsilon"):
            v = e.get(k)
            if v == "inf":  # AuditResult.to_dict() writes infinities as strings
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
                raise _err(path, f"entry {i}: '{k}' must be a number or \"inf\", got {v!r}")
    return a


def _check_attack(path: Path, a: Any) -> dict[str, Any]:
    if not isinstance(a, dict):
        raise _err(
            path, f"must hold a JSON object (AttackResult.to_dict()), got {type(a).__name__}"
        )
    v = a.get("accuracy")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v <= 1.0:
        raise _err(path, f"'accuracy' must be a number in [0, 1], got {v!r}")
    return a


def _classify(obj: Any) -> str | None:
    """ "audit" (an AuditResult dict or a list of them), "attack" (an AttackResult dict) or None."""
    if isinstance(obj, dict) and "epsilon_lower_bound" in obj and "claimed_epsilon" in obj:
        return "audit"
    if isinstance(obj, list) and obj and all(_classify(e) == "audit" for e in obj):
        return "audit"
    if isinstance(obj, dict) and "accuracy" in obj:
        return "attack"
    return None


def _read_extra(
    paths: tuple[Path, ...],
) -> tuple[list[tuple[Path, list[dict[str, Any]]]], list[tuple[Path, dict[str, Any]]]]:
    """Audits and attacks from extra folders (their audit.json, attack_*.json and any other
    JSON file holding an audit or attack result) and extra files."""
    audits: list[tuple[Path, list[dict[str, Any]]]] = []
    attacks: list[tuple[Path, dict[str, Any]]] = []
    for base in paths:
        if base.is_dir():
            files = sorted(f for f in base.glob("*.json") if f.is_file())
            strict = {"audit.json"} | {f.name for f in base.glob("attack_*.json")}
        elif base.is_file():
            files, strict = [base], {base.name}
        else:
            raise RunDirectoryError(
                f"extra must be existing folders or JSON files, got {str(base)!r} (not found)"
            )
        for f in files:
            obj = _read_json(f)
            kind = _classify(obj)
            if kind is None:
                if f.name in strict:
                    raise _err(f, "holds neither an audit result nor an attack result")
                continue  # e.g. a report.json or config.json in the same folder
            if kind == "audit":
                audits.append((f, _check_audits(f, obj if isinstance(obj, list) else [obj])))
            else:
                attacks.append((f, _check_attack(f, obj)))
    return audits, attacks


def load_run(run_dir: str | Path, extra: list[str | Path] | tuple[str | Path, ...] = ()) -> RunData:
    """Load and validate a run directory of any algorithm.

    Args:
        run_dir: the directory a trainer wrote (see docs/interfaces.md).
        extra: folders or JSON files of analyses written outside the run (an audit's
            ``--json`` output, an attack's ``--out``); their audits and attacks are reported
            beside the run's own.

    Returns:
        The validated :class:`RunData`.

    Raises:
        RunDirectoryError: the directory or a required file is missing, or a file is malformed;
            the message names the file and the problem.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirectoryError(f"run_dir must be an existing directory, got {str(path)!r}")
    if not (path / "config.json").is_file():
        raise RunDirectoryError(
            f"{path}: incomplete run directory, missing config.json "
            f"(every run has {', '.join(COMMON_REQUIRED_FILES)})"
        )
    config = _check_config(path / "config.json", _read_json(path / "config.json"))
    # a run that did not complete (Ctrl-C, a crash) may lack the files written at the end: it
    # still reports (ledger, status), saying what is missing
    partial = config.get("status") in ("interrupted", "failed", "running")
    need = REQUIRED_FILES if config["algorithm"] == PGC_ALGORITHM else COMMON_REQUIRED_FILES
    missing = [f for f in need if not (path / f).is_file()]
    if missing and (not partial or "ledger.sqlite" in missing):
        raise RunDirectoryError(
            f"{path}: incomplete run directory, missing {', '.join(missing)} "
            f"(a {config['algorithm']} run has {', '.join(need)})"
        )
    pgc = config["algorithm"] == PGC_ALGORITHM and not missing
    transcript: dict[str, np.ndarray] = {}
    model_theta = np.zeros((0, 0))
    if pgc:
        transcript = _check_transcript(path / "transcript.npz", _read_npz(path / "transcript.npz"))
    metrics: dict[str, Any] = {}
    if (path / "metrics.json").is_file():
        metrics = _check_metrics(path / "metrics.json", _read_json(path / "metrics.json"), pgc=pgc)
    if pgc:
        model = _read_npz(path / "model.npz")
        if "theta" not in model or model["theta"].ndim != 2:
            raise _err(path / "model.npz", "must hold 'theta' of shape (K, d)")
        if model["theta"].shape[1] != transcript["report"].shape[1]:
            raise _err(
                path / "model.npz",
                f"'theta' has d={model['theta'].shape[1]} but the "
                f"transcript's reports have d={transcript['report'].shape[1]}",
            )
        model_theta = model["theta"]
    with open(path / "ledger.sqlite", "rb") as fh:
        head = fh.read(16)
    if head != b"SQLite format 3\x00":
        raise _err(path / "ledger.sqlite", "is not an SQLite database")
    secrets = None
    if pgc and (path / "secrets.npz").is_file():
        secrets = _read_npz(path / "secrets.npz")
        g = secrets.get("gravity")
        if g is not None and g.shape != (transcript["trial"].shape[0],):
            raise _err(
                path / "secrets.npz",
                f"'gravity' must have shape (N={transcript['trial'].shape[0]},), got {g.shape}",
            )
    sources: dict[str, str] = {}
    audits = None
    if (path / "audit.json").is_file():
        audits = _check_audits(path / "audit.json", _read_json(path / "audit.json"))
        sources["audit.json"] = str(path / "audit.json")
    attacks: dict[str, dict[str, Any]] = {}
    for f in sorted(path.glob("attack_*.json")):
        name = f.stem[len("attack_") :]
        attacks[name] = _check_attack(f, _read_json(f))
        sources[f"attack_{name}"] = str(f)
    extra_paths = tuple(Path(e) for e in extra)
    sources["missing"] = ", ".join(missing)
    ex_audits, ex_attacks = _read_extra(extra_paths)
    for f, entries in ex_audits:
        audits = (audits or []) + [dict(e, source=str(f)) for e in entries]
        sources[str(f)] = str(f)
    for f, a in ex_attacks:
        base = str(a.get("attack") or f.stem.removeprefix("attack_"))
        name, k = base, 2
        while name in attacks:
            name, k = f"{base} ({f.name})" if k == 2 else f"{base} ({f.name}, {k})", k + 1
        attacks[name] = a
        sources[f"attack_{name}"] = str(f)
    return RunData(
        path=path,
        config=config,
        ledger_path=path / "ledger.sqlite",
        transcript=transcript,
        metrics=metrics,
        model_theta=model_theta,
        secrets=secrets,
        audits=audits,
        attacks=attacks,
        extra=extra_paths,
        sources=sources,
    )
