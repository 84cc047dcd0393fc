"""Media in and out: the one package through which files enter and leave the engine.

One module per concern, each with its own tests; this package's namespace is their public API:

- `tools`: finding ffmpeg and ffprobe, and what they can do (`find_ffmpeg`, `check_encoder`, `encoder_works`,
  `hwaccel_works`: NVENC and NVDEC proven on a test frame).
- `children`: running, reading and reaping ffmpeg children; their failures as typed errors.
- `headers`, `probe`: `probe(path) -> MediaInfo`, the check and description of every input before any work.
- `timing`: when frames are shown (`FrameTimes`), the frames a job reads (`select` -> `Span`), the audio that
  goes with them (`audio_for`). Pure.
- `decode`: `FrameReader`, frames from an ffmpeg pipe. `encode`: `FrameWriter`, frames to an ffmpeg pipe,
  each at its own time; `choose_encoder` resolves `video.encoder=auto`. `join`: segments into one file with the audio.
- `picture`: what an output keeps of the target's pictures (colour, depth, aspect, alpha; `plan_picture`) and
  whether it can hold the transparency a processor makes (`holds_alpha`), and
  `tracks`: of the rest (audio tracks, subtitles, chapters, tags; `plan_streams`), both decided before any work.
- `images`: `read_image` / `write_image`, the only places image pixels are decoded and encoded.

Every frame that crosses this package is a `Frame`: H×W×3 uint8 RGB. Video frames come out upright (the
container's rotation is applied) and images come out with their EXIF orientation applied. The command lines
themselves are pure functions in `engine.media.commands`.
"""

from engine.media.commands import Audio, OutputPicture, Track
from engine.media.decode import FrameReader
from engine.media.encode import FrameWriter, check_size, choose_encoder
from engine.media.images import (
    IMAGE_FORMATS,
    ImageMetadata,
    image_frame_count,
    kept_metadata,
    read_image,
    read_image_metadata,
    write_image,
)
from engine.media.info import MediaInfo
from engine.media.join import join_segments
from engine.media.picture import alpha_advice, holds_alpha
from engine.media.picture import plan as plan_picture
from engine.media.probe import probe, read_video_metadata
from engine.media.timing import FrameTimes, Span, audio_for, output_rate, select, source_for
from engine.media.tools import (
    available_encoders,
    check_encoder,
    encoder_pixel_formats,
    encoder_works,
    ffmpeg_version,
    find_ffmpeg,
    find_ffprobe,
    hwaccel_works,
)
from engine.media.tracks import StreamsPlan, plan_streams

__all__ = [
    "IMAGE_FORMATS",
    "ImageMetadata",
    "Audio",
    "FrameReader",
    "FrameTimes",
    "FrameWriter",
    "MediaInfo",
    "OutputPicture",
    "Span",
    "StreamsPlan",
    "Track",
    "alpha_advice",
    "audio_for",
    "available_encoders",
    "check_encoder",
    "check_size",
    "choose_encoder",
    "encoder_pixel_formats",
    "encoder_works",
    "ffmpeg_version",
    "find_ffmpeg",
    "find_ffprobe",
    "holds_alpha",
    "hwaccel_works",
    "image_frame_count",
    "kept_metadata",
    "join_segments",
    "output_rate",
    "plan_picture",
    "plan_streams",
    "probe",
    "read_image",
    "read_image_metadata",
    "read_video_metadata",
    "select",
    "source_for",
    "write_image",
]
