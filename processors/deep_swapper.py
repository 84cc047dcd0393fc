"""Deep swapper: puts the one person a DeepFaceLab/DeepFaceLive model was trained on onto the chosen faces — the
user's own `.dfm` file (a path on the command line, an upload in the studio), the best likeness for that person.

A `.dfm` is an ONNX graph; no catalogue entry names the file, so nothing is downloaded and there is no published
sha256 to pin. It is checked when loaded like every downloaded graph, against the catalogue's `[io.dfm]` (or, with
its morph input, `[io.dfm_morph]`): `in_face:0` N×S×S×3, BGR in [0, 1], channels last, S fixed by the graph;
outputs by position: the face's mask, the swapped face (BGR in [0, 1]) and the swapped face's mask, all S×S
(DeepFaceLive's DFMModel; MODELS.md has no entry: the sources are cited in the manifest's comment). A graph that
differs is refused with one line naming each difference. Its sha256 goes to the sidecar. Its licence is the
user's: the model is theirs, and so is having the consent of the person it was trained on.

Per face: the face is cut on DeepFaceLab's whole-face template (`dfl_whole_face`) at S px, run (with `morph`,
how far AMP models morph into their person, where the graph takes it), colour-matched to the target face, and
pasted back under the model's two masks (their overlap), a feathered box, and `blend`. Blend 0 runs nothing and
returns every frame as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import Field

from engine.core.errors import InvalidJob
from engine.core.options import Shown
from engine.core.types import Face, Frame, Mask
from engine.faces import colour, masker
from engine.faces.align import estimate_affine, paste_back, warp_face
from engine.faces.masks import box_mask
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import from_planes, from_tensor, to_tensor

TEMPLATE = "dfl_whole_face"
MORPH_INPUT = "morph_value:0"
# The models' outputs, in graph order.
FACE_MASK, SWAPPED, SWAPPED_MASK = range(3)


class DeepSwapperOptions(ProcessorOptions):
    model_file: Annotated[Path | None, Shown(file=".dfm")] = Field(
        default=None,
        description="the DeepFaceLab/DeepFaceLive model (.dfm) of the person to put in: your own file (its licence "
        "and the consent of its person are yours)",
    )
    morph: Annotated[int, Shown(unit="%")] = Field(
        default=100, ge=0, le=100, description="AMP models: how far the face morphs into the model's person"
    )
    blend: Annotated[int, Shown(unit="%")] = Field(
        default=100, ge=0, le=100, description="% of the swapped face over the original (0: nothing runs)"
    )
    colour: Literal["reinhard", "histogram", "none"] = Field(
        default="reinhard", description="match the swapped face's colours to the target face's"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="box mask feather, fraction of the crop")


class DeepSwapper(FrameProcessor[DeepSwapperOptions]):
    """Swaps the `.dfm` model's person onto every face in `ctx.faces` (see the module docstring)."""

    id: ClassVar[str] = "deep_swapper"
    title: ClassVar[str] = "Deep swapper (your .dfm model)"
    Options: ClassVar[type[ProcessorOptions]] = DeepSwapperOptions
    needs_faces: ClassVar[bool] = True

    def __init__(self, options: DeepSwapperOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.model: LoadedModel | None = None
        if options.blend == 0:
            return
        if options.model_file is None:
            raise InvalidJob(
                "deep_swapper needs your .dfm model: --set deep_swapper.model_file=PATH (in the studio: upload it)"
            )
        candidates = [runtime.manifest.named_io("dfm"), runtime.manifest.named_io("dfm_morph")]
        self.model = runtime.load_user(
            self.id, options.model_file, candidates, options.backend, template=TEMPLATE, title="your .dfm model"
        )

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"options": self.options.model_dump(mode="json")}
        if self.model is not None:
            info.update(self.model.describe(), size=self.model.spec.input_size)
        return info

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Each frame (H×W×3 uint8 RGB) with its faces swapped; frames without faces, or blend 0, as they were."""
        if self.model is None:
            return list(frames)
        out = list(frames)
        for i, ctx in enumerate(ctxs):
            for face in ctx.faces:
                swapped, mask, affine = self._swap(out[i], face)
                out[i] = paste_back(out[i], swapped, affine, mask)
        return out

    def frame_masks(self, frame: Frame, faces: Sequence[Face]) -> list[Mask]:
        """Each face's paste-back mask on `frame` (H×W float32 in [0, 1]), as `process` makes it (face debugger)."""
        if self.model is None:
            return [np.zeros(frame.shape[:2], np.float32) for _ in faces]
        return [masker.to_frame(mask, affine, frame.shape) for _, mask, affine in (self._swap(frame, f) for f in faces)]

    def _swap(self, frame: Frame, face: Face) -> tuple[Frame, Mask, npt.NDArray[np.float64]]:
        """(the swapped crop, its paste-back mask, the crop's affine) of one face."""
        assert self.model is not None and self.model.spec.input_size is not None
        spec, size = self.model.spec, self.model.spec.input_size
        affine = estimate_affine(face.landmarks5, TEMPLATE, size)
        crop = warp_face(frame, affine, size)
        inputs: dict[str, npt.NDArray[np.float32]] = {
            spec.io.input: np.ascontiguousarray(np.transpose(to_tensor(crop[None], spec.io), (0, 2, 3, 1)))
        }
        if any(t.name == MORPH_INPUT for t in spec.io.inputs):
            inputs[MORPH_INPUT] = np.array([self.options.morph / 100.0], np.float32)
        outputs = [np.asarray(o, np.float32) for o in self.model.session.run(inputs)]
        swapped = from_tensor(outputs[SWAPPED], spec.io, layout="NHWC")[0]
        masks = [from_planes(outputs[k], spec.io, layout="NHWC")[0][:, :, 0] for k in (FACE_MASK, SWAPPED_MASK)]
        if swapped.shape[:2] != (size, size):
            swapped = cv2.resize(swapped, (size, size), interpolation=cv2.INTER_CUBIC)
        model_mask = cv2.resize(np.minimum(*masks), (size, size), interpolation=cv2.INTER_LINEAR)
        # A soft edge: the models' masks are sharp where they cut the face out.
        model_mask = cv2.GaussianBlur(model_mask, (0, 0), max(size / 96.0, 0.5))
        mask = (model_mask * box_mask(size, blur=self.options.mask_blur) * (self.options.blend / 100.0)).astype(
            np.float32
        )
        if self.options.colour != "none":
            swapped = colour.transfer(
                swapped, crop, np.clip(model_mask, 0.0, 1.0).astype(np.float32), self.options.colour
            )
        return swapped, mask, affine
