"""One optimal one-to-one assignment of rows to columns over a cost matrix (the Hungarian problem), as the face
tracker and the people scan link faces: rows are tracks or faces, columns detections or people.

Most calls have no conflict — each row's cheapest column is a different one — and then that is the optimum
outright (each row at its own minimum: no assignment costs less). Only a conflict goes to
`scipy.optimize.linear_sum_assignment`, imported then: importing scipy.optimize costs about 0.35 CPU-s, a fifth of
a `faces scan` of a short clip, and most processes never need it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# Forbidden pairs (inf) are given this cost for scipy, which needs finite costs; far above any real cost (the
# callers' are at most a few units), so an assignment never takes one while an allowed pair is available.
_FORBIDDEN = 1e6


def assign(cost: npt.ArrayLike) -> list[tuple[int, int]]:
    """The (row, column) pairs of a minimum-cost assignment over `cost` (R×C float; inf: never pair these), each
    row and column at most once: as many allowed pairs as possible, and of those the least total cost. Sorted by
    row. Ties between equal costs may be broken either way."""
    matrix = np.asarray(cost, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"cost must be a 2-d matrix, got shape {matrix.shape}")
    if not matrix.size:
        return []
    allowed = np.isfinite(matrix)
    rows = np.flatnonzero(allowed.any(axis=1))
    best = np.where(allowed, matrix, np.inf)[rows].argmin(axis=1)
    if len(np.unique(best)) == len(best):
        return [(int(r), int(c)) for r, c in zip(rows, best, strict=True)]
    from scipy.optimize import linear_sum_assignment

    picked = zip(*linear_sum_assignment(np.where(allowed, matrix, _FORBIDDEN)), strict=True)
    return [(int(r), int(c)) for r, c in picked if allowed[r, c]]
