"""A fake algorithm's report sections (tests of ldp_audit.report._sections)."""

from __future__ import annotations

import io
from pathlib import Path

CALLS: list[tuple[Path, list[Path] | None]] = []


def _png() -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1))
    FigureCanvasAgg(fig)
    fig.subplots().plot([0, 1], [1, 0])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict]:
    CALLS.append((run_dir, extra))
    return [
        {
            "id": "learning",
            "title": "Fake learning curve",
            "paragraphs": ["Returns rose over `3` epochs."],
            "tables": [
                {
                    "caption": "Privacy per scope",
                    "header": ["scope", "epsilon"],
                    "rows": [["central", 1.5], ["local", float("inf")]],
                }
            ],
            "figures": {"curve": _png()},
            "data": {"returns": [1.0, 2.0, float("inf")]},
        }
    ]


def raising_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict]:
    raise RuntimeError("the fake trainer's section exploded")


def malformed_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict]:
    return [
        {"id": "ok", "title": "Fine", "paragraphs": ["fine"]},
        {"id": "bad", "title": "Bad figure", "figures": {"x": b"not a png"}},
    ]
