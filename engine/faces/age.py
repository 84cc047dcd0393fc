"""How old a face looks, by FairFace (dchen236/FairFace, CC BY 4.0): the age group its classifier picks.

The face is cut on `arcface_112_v2` at the model's size (224 px), normalised by its catalogue entry (RGB, ImageNet
mean and standard deviation), and the graph's third output is read as the index of one of FairFace's nine age
groups (the graph takes the arg-max itself: its outputs are the race, gender and age indices, in that order;
MODELS.md §13, FaceFusion face_classifier.py L73-135). A group stands for its middle year.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.core.types import Face, Frame
from engine.faces.align import estimate_affine, warp_face
from engine.models.runtime import LoadedModel
from engine.models.tensor import to_tensor

# FairFace's age groups in years (its README: 0-2, 3-9, 10-19, … 60-69, 70+), by output index.
AGE_GROUPS = ((0, 2), (3, 9), (10, 19), (20, 29), (30, 39), (40, 49), (50, 59), (60, 69), (70, 80))
AGE_OUTPUT = 2


def middle_year(group: int) -> float:
    """The middle year of FairFace age group `group` (an index into AGE_GROUPS, clamped to it)."""
    low, high = AGE_GROUPS[min(max(int(group), 0), len(AGE_GROUPS) - 1)]
    return (low + high) / 2.0


def estimate_ages(classifier: LoadedModel, frame: Frame, faces: Sequence[Face]) -> list[float]:
    """The apparent age in years of each face on `frame` (H×W×3 uint8 RGB): its FairFace group's middle year."""
    spec = classifier.spec
    size, template = spec.input_size or 224, spec.template or "arcface_112_v2"
    ages = []
    for face in faces:
        crop = warp_face(frame, estimate_affine(face.landmarks5, template, size), size)
        outputs = classifier.session.run({spec.io.input: to_tensor(crop[None], spec.io)})
        ages.append(middle_year(int(np.ravel(outputs[AGE_OUTPUT])[0])))
    return ages
