"""Index groups of the 68-point face landmark layout (iBUG 300-W), shared by every module that reads them."""

from __future__ import annotations

JAW = slice(0, 17)
BROWS = slice(17, 27)
NOSE_BRIDGE_TOP = 27
NOSE_TIP = 30
CHIN = 8
LEFT_EYE = slice(36, 42)  # image-left
RIGHT_EYE = slice(42, 48)
MOUTH = slice(48, 68)
MOUTH_LEFT, MOUTH_RIGHT = 48, 54
INNER_MOUTH = slice(60, 68)
