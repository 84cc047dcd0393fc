"""engine/faces/assignment: the optimum of scipy's linear_sum_assignment, without importing scipy when no two rows
want the same column."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from engine.faces.assignment import assign

ROOT = Path(__file__).resolve().parent.parent


def _scipy(cost: np.ndarray) -> list[tuple[int, int]]:
    allowed = np.isfinite(cost)
    rows, cols = linear_sum_assignment(np.where(allowed, cost, 1e6))
    return [(int(r), int(c)) for r, c in zip(rows, cols, strict=True) if allowed[r, c]]


def test_every_assignment_is_scipys_optimum() -> None:
    rng = np.random.default_rng(7)
    conflicts = 0
    for _ in range(2000):
        shape = tuple(rng.integers(1, 6, size=2))
        cost = rng.uniform(0.0, 2.0, size=shape)
        cost[rng.uniform(size=shape) < 0.3] = np.inf
        best = cost[np.isfinite(cost).any(axis=1)]
        conflicts += len(set(np.where(np.isfinite(best), best, np.inf).argmin(axis=1))) < len(best)
        # Random costs have no ties, so the optimum is unique: the very pairs scipy picks.
        assert assign(cost) == _scipy(cost), cost
    assert conflicts > 300  # both paths were taken, many times


def test_a_conflict_is_resolved_for_the_least_total() -> None:
    # Both rows' cheapest column is 0; the optimum gives it to row 1 (1 + 2 = 3 against 1 + 10 = 11).
    assert assign([[1.0, 2.0], [1.0, 10.0]]) == [(0, 1), (1, 0)]


def test_forbidden_pairs_are_never_made_and_as_many_allowed_ones_as_possible() -> None:
    inf = np.inf
    assert assign([[inf, inf], [0.5, inf]]) == [(1, 0)]
    # Row 0 alone could take column 0 more cheaply, but then row 1 (only column 0 allowed) would be left out.
    assert assign([[0.1, 0.9], [0.2, inf]]) == [(0, 1), (1, 0)]
    assert assign(np.full((2, 3), inf)) == []
    assert assign(np.zeros((0, 4))) == []


def test_a_cost_that_is_not_a_matrix_is_refused() -> None:
    with pytest.raises(ValueError, match="2-d matrix"):
        assign([1.0, 2.0])


@pytest.mark.parametrize(("cost", "imported"), [("[[0.2, 0.9], [0.8, 0.1]]", False), ("[[1, 2], [1, 10]]", True)])
def test_scipy_is_imported_only_for_a_conflict(cost: str, imported: bool) -> None:
    code = (
        "import sys; from engine.faces.assignment import assign; "
        f"print(assign({cost}), 'scipy.optimize' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == str(imported)
