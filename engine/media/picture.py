"""What an output keeps of its target's pictures — colour description, bit depth, sample aspect ratio, alpha —
decided once per job before any work (`plan`), and how the target's frames are decoded to keep it (`decoding`).

Frames cross the engine as 8-bit RGB (`Frame`). A decoder turns the stored YCbCr into RGB with the matrix and
range the file names (or, where it names none, the one players assume for its size), and the encoder turns the
processed RGB back with the same matrix and range and tags the output with the target's primaries, transfer,
matrix and range: the colours a viewer sees are the target's. Bit depth: a target of more than 8 bits is written
at 10 where the encoder can (processing itself is 8-bit). The sample aspect ratio is written as the target's (its
frames are upright, so a quarter turn inverts it). Transparency is kept by an encoder that can hold it in the
chosen container (ProRes 4444 in MOV, VP9 in WebM or Matroska, lossless RGBA segments for a GIF) or refused.

Pure: nothing here runs a process; what pixel formats an encoder takes in the ffmpeg in use is asked by the
caller (`tools.encoder_pixel_formats`) and passed in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from fractions import Fraction
from pathlib import Path

from engine.core.errors import InvalidInput
from engine.media import commands as cmd
from engine.media.commands import OutputPicture
from engine.media.images import ALPHA_FORMATS, IMAGE_FORMATS
from engine.media.info import MediaInfo, Picture

# The YCbCr matrices swscale converts exactly, by their ffprobe name, as the `scale` filter's color_matrix names.
SWSCALE_MATRIX: Mapping[str, str] = {
    "bt709": "bt709", "smpte170m": "smpte170m", "bt470bg": "bt470", "fcc": "fcc", "smpte240m": "smpte240m",
    "bt2020nc": "bt2020",
}  # fmt: skip
# The primaries and transfer a matrix comes with, for a file that names its matrix but not those.
_WITH_MATRIX: Mapping[str, tuple[str, str]] = {
    "bt709": ("bt709", "bt709"), "smpte170m": ("smpte170m", "smpte170m"), "bt470bg": ("bt470bg", "smpte170m"),
    "fcc": ("bt470m", "bt709"), "smpte240m": ("smpte240m", "smpte240m"), "bt2020nc": ("bt2020", "bt2020-10"),
}  # fmt: skip
# The colour descriptions (primaries, transfer) the `colorspace` filter converts from, for an output that cannot
# carry a description (a GIF, whose colours are sRGB's).
_CONVERTIBLE_PRIMARIES = frozenset({"bt709", "bt470m", "bt470bg", "smpte170m", "smpte240m", "film", "bt2020"})
_CONVERTIBLE_TRANSFERS = frozenset(
    {"bt709", "gamma22", "gamma28", "smpte170m", "smpte240m", "iec61966-2-1", "iec61966-2-4", "bt2020-10",
     "bt2020-12", "unknown"}
)  # fmt: skip
# Transfer characteristics of HDR video (frames are processed as 8-bit SDR: refused, with the tone mapping to run).
HDR_TRANSFERS: Mapping[str, str] = {"smpte2084": "HDR10 (PQ)", "arib-std-b67": "HLG"}

# The encoder that keeps transparency in each container (ffmpeg muxer), and the pixel format it is given.
ALPHA_ENCODERS: Mapping[str, str] = {"mov": "prores_ks", "matroska": "libvpx-vp9", "webm": "libvpx-vp9"}
_ALPHA_FORMAT: Mapping[str, str] = {"prores_ks": "yuva444p10le", "libvpx-vp9": "yuva420p"}
_ALPHA_NAMES: Mapping[str, str] = {"prores_ks": "ProRes 4444", "libvpx-vp9": "VP9 with alpha"}
# What each encoder is given for 8 and for 10 bits (NVENC: p010le; H.264 NVENC has no 10-bit mode before Blackwell).
_FORMATS: Mapping[str, tuple[str, str | None]] = {
    "libx264": ("yuv420p", "yuv420p10le"), "libx265": ("yuv420p", "yuv420p10le"),
    "h264_nvenc": ("yuv420p", None), "hevc_nvenc": ("yuv420p", "p010le"), "av1_nvenc": ("yuv420p", "p010le"),
    "libvpx-vp9": ("yuv420p", "yuv420p10le"), "prores_ks": ("yuv422p10le", "yuv422p10le"),
}  # fmt: skip


def holds_alpha(output: Path, encoder: str = "auto") -> bool:
    """Whether an output at `output` can hold transparency: a PNG, WebP or TIFF image; a GIF (its transparent
    colour); a MOV, WebM or Matroska video whose `video.encoder` (`encoder`) is `auto` or the encoder that keeps
    alpha there (ProRes 4444, VP9). What a processor that makes frames transparent asks before it decides to hand
    the pipeline an alpha plane or composite instead."""
    suffix = output.suffix.lower()
    if suffix in IMAGE_FORMATS:
        return IMAGE_FORMATS[suffix] in ALPHA_FORMATS
    if suffix == cmd.GIF_SUFFIX:
        return True
    wanted = ALPHA_ENCODERS.get(cmd.MUXERS.get(suffix, ""))
    return wanted is not None and encoder in ("auto", wanted)


def alpha_advice(output: Path, encoder: str = "auto") -> str:
    """What to write instead of `output` (by `encoder`) to have transparency, for a note where it has none."""
    suffix = output.suffix.lower()
    if suffix in IMAGE_FORMATS:
        return "write a PNG, WebP or TIFF image"
    wanted = ALPHA_ENCODERS.get(cmd.MUXERS.get(suffix, ""))
    if wanted is not None and encoder != wanted:
        return f"set video.encoder=auto, which writes {_ALPHA_NAMES[wanted]} in {suffix}"
    return "write .mov (ProRes 4444), .webm or .mkv (VP9 with alpha) or .gif"


def decoding(picture: Picture, width: int, height: int) -> tuple[str | None, str | None]:
    """The matrix (swscale's name) and range ("tv", "pc", None: as the pixel format says) to decode a video's
    YCbCr frames to RGB with: the file's own, or for a file that names none the one players assume for its size
    (BT.709 from 1280 pixels wide or 577 lines up, else BT.601). (None, None) for RGB frames."""
    if picture.rgb:
        return None, None
    matrix = picture.matrix if picture.matrix in SWSCALE_MATRIX else _assumed_matrix(width, height)
    return SWSCALE_MATRIX[matrix], picture.range if picture.range in ("tv", "pc") else None


def _assumed_matrix(width: int, height: int) -> str:
    return "bt709" if width >= 1280 or height > 576 else "smpte170m"


def check_colour(info: MediaInfo) -> None:
    """InvalidInput, before any work, for a video whose colours this pipeline cannot reproduce: HDR (PQ, HLG),
    processed as 8-bit SDR it would come out washed out, so the tone mapping to run first is given; a YCbCr
    matrix swscale does not convert (constant-luminance BT.2020, YCgCo, ICtCp)."""
    picture = info.picture
    if picture.transfer in HDR_TRANSFERS:
        raise InvalidInput(
            f"{info.path} is {HDR_TRANSFERS[picture.transfer]} HDR video, which would come out with wrong colours "
            f"(processing is 8-bit SDR): tone-map it to SDR first, e.g. {TONEMAP}"
        )
    if not picture.rgb and picture.matrix not in (*SWSCALE_MATRIX, "unknown", "reserved", "unspecified"):
        raise InvalidInput(
            f"{info.path} uses the {picture.matrix} colour matrix, which this ffmpeg cannot convert exactly: convert "
            "it to BT.709 first, e.g. ffmpeg -i IN -vf colorspace=all=bt709:format=yuv420p OUT.mp4"
        )


TONEMAP = (
    "ffmpeg -i IN -vf zscale=t=linear:npl=100,format=gbrpf32le,zscale=p=bt709,tonemap=hable,"
    "zscale=t=bt709:m=bt709:r=tv,format=yuv420p OUT.mp4"
)


def gif_conversion(picture: Picture) -> str | None:
    """The `colorspace` filter that brings a target's colours to BT.709/sRGB for a GIF, which carries no colour
    description (None when they are that already or the file does not say). Frames with other primaries
    (BT.2020, say) would otherwise look washed out in it."""
    if picture.rgb or picture.primaries in ("bt709", "unknown", "smpte170m", "bt470bg"):
        return None
    if picture.primaries not in _CONVERTIBLE_PRIMARIES or picture.transfer not in _CONVERTIBLE_TRANSFERS:
        return None
    space = {"bt2020nc": "bt2020ncl"}.get(picture.matrix, picture.matrix)
    source = f"iprimaries={picture.primaries}:itrc={_trc(picture)}:ispace={space}"
    return f"colorspace=all=bt709:{source}:format=yuv444p"


def _trc(picture: Picture) -> str:
    return {"unknown": "bt709", "iec61966-2-1": "srgb"}.get(picture.transfer, picture.transfer)


def plan(
    info: MediaInfo,
    encoder: str,
    muxer: str,
    *,
    alpha: str = "keep",
    formats: Collection[str] | None = None,
    made_alpha: bool = False,
) -> OutputPicture:
    """How the frames of the video `info` describes are encoded into a container of ffmpeg muxer `muxer` ("mp4",
    "mov", "matroska", "webm", or "gif" for an animated GIF's lossless segments) by `encoder` (the job's, `auto`
    already resolved by `choose_encoder`, which picks the alpha and 10-bit encoders this plan expects).

    alpha: the target's own transparency: "keep" (an encoder that holds the alpha, or InvalidInput naming the
    containers that can) or "drop" (flattened onto black, said in the notes). made_alpha: the chain makes the
    frames transparent (a background remover, `FrameProcessor.makes_alpha`): written as the output's alpha where
    this encoder and container hold it (`holds_alpha`), else left to the processor, which composites (and says
    so). formats: the pixel formats `encoder` takes in this ffmpeg (None: the known table). Raises InvalidInput
    for what cannot be written as it is (see `check_colour`, too).
    """
    picture = info.picture
    target_alpha = picture.alpha and alpha == "keep"
    made = made_alpha and (muxer == "gif" or ALPHA_ENCODERS.get(muxer) == encoder)
    keep_alpha = target_alpha or made
    notes: list[str] = []
    if picture.alpha and alpha == "drop":
        notes.append("alpha: the target's transparency is dropped (video.alpha=drop); the frames are opaque")
    if muxer == "gif":
        convert = gif_conversion(picture)
        if convert is not None:
            notes.append(f"colour: converted from {picture.primaries} to BT.709 (sRGB) for the GIF, which has no "
                         "colour description")  # fmt: skip
        if picture.sar != 1:
            notes.append(f"aspect: the GIF's pixels are square, so frames are widened to their display aspect "
                         f"{_display(info.width, info.height, picture.sar)}")  # fmt: skip
        if keep_alpha:
            notes.append(f"alpha: {'kept' if target_alpha else 'written'} as the GIF's transparent colour (pixels "
                         "under half opacity)")  # fmt: skip
            encoder, pix_fmt = cmd.GIF_ALPHA_ENCODER, "argb"
        else:
            encoder, pix_fmt = cmd.INTERMEDIATE_ENCODER, "rgb24"
        return OutputPicture(encoder, pix_fmt, None, "pc", sar=picture.sar, alpha=keep_alpha, notes=tuple(notes),
                             convert=convert)  # fmt: skip
    if target_alpha:
        wanted = ALPHA_ENCODERS.get(muxer)
        if wanted is None:
            raise InvalidInput(
                f"{info.path.name} has transparency (an alpha channel), which {muxer.upper()} cannot hold: write "
                ".mov (ProRes 4444), .webm or .mkv (VP9) to keep it, or set video.alpha=drop to flatten it"
            )
        if encoder != wanted:
            raise InvalidInput(
                f"{info.path.name} has transparency (an alpha channel), which {encoder} cannot keep: use "
                f"video.encoder=auto ({wanted} in this container), or set video.alpha=drop to flatten it"
            )
    if keep_alpha:
        notes.append(f"alpha: {'kept' if target_alpha else 'written'} ({_ALPHA_NAMES[encoder]})")
    matrix, range_ = _output_colour(picture, info.width, info.height)
    colorspace, primaries, transfer = _tags(picture, info.width, info.height)
    eight, ten = _FORMATS.get(encoder, ("yuv420p", None))
    pix_fmt = eight
    if keep_alpha:
        pix_fmt = _ALPHA_FORMAT[encoder]
        if picture.depth > 8 and encoder == "libvpx-vp9":
            notes.append("depth: 8-bit, since VP9 keeps transparency only at 8 bits (the target is "
                         f"{picture.depth}-bit)")  # fmt: skip
    elif picture.depth > 8:
        if ten is not None and (formats is None or ten in formats):
            pix_fmt = ten
            notes.append(f"depth: 10-bit ({encoder}, {ten}) like the target; frames are processed at 8 bits")
        else:
            notes.append(
                f"depth: 8-bit, since {encoder} writes no 10-bit video here (the target is {picture.depth}-bit): "
                "set video.encoder=libx265 to keep 10 bits"
            )
    if picture.sar != 1:
        notes.append(f"aspect: pixels kept {picture.sar.numerator}:{picture.sar.denominator} (shown "
                     f"{_display(info.width, info.height, picture.sar)})")  # fmt: skip
    return OutputPicture(encoder, pix_fmt, matrix, range_, colorspace, primaries, transfer, picture.sar, keep_alpha,
                         tuple(notes))  # fmt: skip


def _display(width: int, height: int, sar: Fraction) -> str:
    shown = Fraction(width, height) * sar
    return f"{shown.numerator}:{shown.denominator}"


def _output_colour(picture: Picture, width: int, height: int) -> tuple[str, str]:
    """The matrix (swscale's name) and range the processed RGB frames are encoded with: the target's own (what
    it was decoded with), or BT.709 limited range for a target that names none or is RGB."""
    known = not picture.rgb and picture.matrix in SWSCALE_MATRIX
    matrix = SWSCALE_MATRIX[picture.matrix] if known else "bt709"
    if picture.range in ("tv", "pc"):
        return matrix, picture.range
    return matrix, "pc" if picture.pix_fmt.startswith("yuvj") else "tv"


def _tags(picture: Picture, width: int, height: int) -> tuple[str, str, str]:
    """(colorspace, primaries, transfer) the output is tagged with: the target's where it says, else what goes
    with its matrix; BT.709 for a target that names nothing (what it was shown as, `decoding`)."""
    if picture.rgb or picture.matrix not in SWSCALE_MATRIX:
        primaries = picture.primaries if picture.primaries not in ("unknown", "reserved") else "bt709"
        transfer = picture.transfer if picture.transfer not in ("unknown", "reserved") else "bt709"
        return "bt709", primaries, transfer
    primaries, transfer = _WITH_MATRIX[picture.matrix]
    if picture.primaries not in ("unknown", "reserved"):
        primaries = picture.primaries
    if picture.transfer not in ("unknown", "reserved"):
        transfer = picture.transfer
    return picture.matrix, primaries, transfer
