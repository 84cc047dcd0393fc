"""Box arithmetic for (x1, y1, x2, y2) boxes in pixels (x2/y2 exclusive), shared by detection and tracking."""

from __future__ import annotations

from collections.abc import Sequence


def area(box: Sequence[float]) -> float:
    """Area in square pixels; 0 for an empty or inverted box."""
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two boxes, in [0, 1]; 0 when either box is empty."""
    inter = area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0
