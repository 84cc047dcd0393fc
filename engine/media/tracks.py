"""Everything but the picture that an output takes from its target — every audio track, subtitles, chapters, and
the tags the user put on the file and its video stream — planned once per job, before any work (`plan_streams`):
what goes in as it is, what is converted (with a note), and what cannot (a one-line refusal, or a note where
leaving it out loses nothing the user sees, such as a camera's telemetry track). Pure: nothing here runs a process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.core.errors import InvalidInput
from engine.media import commands as cmd
from engine.media.info import MediaInfo

# Container tags that describe the old file's structure or the tool that wrote it, not its content: never copied
# (the muxer writes its own).
_FILE_TAGS = frozenset({"major_brand", "minor_version", "compatible_brands", "encoder", "duration"})
# The video stream's own tags worth keeping (the rest describe its old encoding: encoder, statistics, duration …).
_VIDEO_TAGS = frozenset({"language", "title", "timecode", "comment", "creation_time"})
# Sample rates Opus takes; anything else is resampled to 48 kHz for WebM.
_OPUS_RATES = frozenset({48000, 24000, 16000, 12000, 8000})
_CONTAINER_NAMES = {"mp4": "MP4", "mov": "MOV", "matroska": "Matroska", "webm": "WebM", "gif": "GIF"}


@dataclass(frozen=True)
class StreamsPlan:
    """What the join takes from the target besides its video (see `plan_streams`).

    tracks: the audio and subtitle streams and how (`cmd.Track`); chapters: copy the target's chapters;
    tags: the container's tags to write (the user's, then ours added); video_tags: the video stream's;
    audio: how many audio tracks the output has; notes: lines for the run's summary.
    """

    tracks: tuple[cmd.Track, ...] = ()
    chapters: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    video_tags: Mapping[str, str] = field(default_factory=dict)
    audio: int = 0
    notes: tuple[str, ...] = ()

    @property
    def takes_source(self) -> bool:
        """Whether the join reads the target at all (a track or its chapters)."""
        return bool(self.tracks) or self.chapters


def plan_streams(
    info: MediaInfo,
    muxer: str,
    ours: Mapping[str, str],
    *,
    keep_audio: bool = True,
    keep_metadata: bool = True,
    cut: bool = False,
) -> StreamsPlan:
    """What an output in a container of ffmpeg muxer `muxer` ("mp4", "mov", "matroska", "webm", "gif") takes from
    the video target `info` describes.

    ours: the synthetic-media tags (always written, added to the user's: a `comment` of the user's is kept, ours
    after it). keep_audio: every audio track, each copied where the container holds its codec and the span is not
    cut (`cut`: trimmed, or sound before the first picture), else re-encoded (AAC; Opus in WebM), resampled to
    48 kHz where the encoder takes no more, with a note saying which and why. keep_metadata: the user's container
    and video-stream tags, chapters and subtitles (False: ours alone, said in a note). Raises InvalidInput for audio
    the container's encoder cannot hold (more channels than it takes), naming the containers that keep it as it is.
    """
    notes: list[str] = []
    tracks: list[cmd.Track] = []
    if muxer == "gif":
        if keep_audio and info.audio_tracks:
            notes.append("audio: not kept, a GIF holds no sound")
    elif keep_audio:
        tracks += _audio(info, muxer, cut, notes)
    elif info.audio_tracks:
        notes.append("audio: not kept (video.keep_audio=false)")
    tags = dict(ours)
    video_tags: dict[str, str] = {}
    chapters = False
    if keep_metadata:
        user = {k: v for k, v in info.tags.items() if k not in _FILE_TAGS and v}
        if user.get("comment") and ours.get("comment"):
            user["comment"] = f"{user['comment']}\n{ours['comment']}"
        tags = {**user, **{k: v for k, v in ours.items() if k != "comment" or "comment" not in user}}
        video_tags = {k: v for k, v in info.video_tags.items() if k in _VIDEO_TAGS and v and v != "und"}
        chapters = info.chapters > 0 and muxer != "gif"
        if muxer != "gif":
            tracks += _subtitles(info, muxer, notes)
    elif info.tags.keys() - _FILE_TAGS or info.chapters:
        notes.append("metadata: the target's tags and chapters are not kept (video.keep_metadata=false)")
    left = sorted({codec for kind, codec in info.other_streams if kind in ("data", "attachment", "video")})
    if left:
        notes.append(f"streams: not kept: {', '.join(left)} (a camera's data, attachments or further video)")
    audio = sum(1 for t in tracks if t.kind == "a")
    return StreamsPlan(tuple(tracks), chapters, tags, video_tags, audio, tuple(notes))


def _audio(info: MediaInfo, muxer: str, cut: bool, notes: list[str]) -> list[cmd.Track]:
    tracks = []
    encoder = cmd.AUDIO_ENCODER[muxer]
    for track in info.audio_tracks:
        copied = track.codec in cmd.COPYABLE_AUDIO[muxer] and not cut
        if copied:
            tracks.append(cmd.Track("a", track.number))
            continue
        most = cmd.AUDIO_MAX_CHANNELS[encoder]
        if track.channels > most:
            keep = [n for m, n in _CONTAINER_NAMES.items() if m in cmd.COPYABLE_AUDIO and track.codec in
                    cmd.COPYABLE_AUDIO[m]]  # fmt: skip
            instead = (
                f"write {' or '.join(keep)}, which keep its {track.codec} as it is, or set video.keep_audio=false"
                if keep and not cut
                else "set video.keep_audio=false"
            )
            layout = f" ({track.layout})" if track.layout else ""
            raise InvalidInput(
                f"{info.path.name}'s audio track {track.number + 1} has {track.channels} channels{layout}, "
                f"and {encoder} in {_CONTAINER_NAMES[muxer]} holds at most {most}: {instead}"
            )
        rate = None
        if track.sample_rate > cmd.AUDIO_MAX_RATE[encoder] or (
            encoder == "libopus" and track.sample_rate not in _OPUS_RATES
        ):
            rate = 48000
        why = "to cut it to the output's span" if cut else f"{_CONTAINER_NAMES[muxer]} cannot hold {track.codec}"
        resampled = f", resampled from {track.sample_rate} Hz to 48000 Hz for {encoder}" if rate else ""
        notes.append(f"audio: track {track.number + 1} re-encoded from {track.codec} to {encoder} ({why}){resampled}")
        tracks.append(cmd.Track("a", track.number, encoder, rate))
    if len(tracks) > 1:
        languages = [t.language or "und" for t in info.audio_tracks]
        notes.append(f"audio: {len(tracks)} tracks kept ({', '.join(languages)})")
    return tracks


def _subtitles(info: MediaInfo, muxer: str, notes: list[str]) -> list[cmd.Track]:
    tracks = []
    subtitles = [codec for kind, codec in info.other_streams if kind == "subtitle"]
    for number, codec in enumerate(subtitles):
        if codec in cmd.COPYABLE_SUBTITLES[muxer]:
            tracks.append(cmd.Track("s", number))
        elif codec in cmd.TEXT_SUBTITLES and muxer in ("mp4", "mov"):
            tracks.append(cmd.Track("s", number, "mov_text"))
        else:
            notes.append(
                f"subtitles: track {number + 1} ({codec}) not kept, {_CONTAINER_NAMES[muxer]} cannot hold it: "
                "write .mkv to keep it"
            )
    return tracks
