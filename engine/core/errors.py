"""Typed errors. Each carries a one-line, actionable message; the CLI maps them to exit codes.

The engine never exits the process: it raises one of these, and the command line (`cli/`) decides the exit code.
"""

from __future__ import annotations

from pathlib import Path


class FacestudioError(Exception):
    """Base of every foreseeable error. `exit_code` is what the CLI exits with (ARCHITECTURE.md §7)."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        # One line: a multi-line message would break the CLI's "error: …" contract.
        super().__init__(" ".join(str(message).split()))

    @property
    def message(self) -> str:
        return str(self)


class InvalidInput(FacestudioError):
    """A file, option or argument the user gave cannot be used (exit 2)."""

    exit_code = 2


class InvalidJob(InvalidInput):
    """A job, preset or `--set` override failed validation (exit 2)."""


class TruncatedInput(InvalidInput):
    """A video decoded to fewer frames than its container declares (exit 2)."""


class NoFaceInSource(InvalidInput):
    """No face was found in the source image(s) (exit 2)."""


class ConsentRequired(InvalidInput):
    """The responsible-use notice has not been acknowledged (exit 2)."""


class ModelUnavailable(FacestudioError):
    """A model file is missing and cannot be fetched (offline, network error) (exit 3)."""

    exit_code = 3


class ChecksumMismatch(ModelUnavailable):
    """A downloaded or placed model file does not have the manifest's sha256 (exit 3)."""


class ModelSignatureMismatch(ModelUnavailable):
    """A downloaded graph's inputs or outputs differ from what its manifest entry declares (exit 3)."""


class UnsafeWeights(ModelUnavailable):
    """A weights file holds pickled Python objects besides tensors (code could run on load); refused (exit 3)."""


class BackendUnavailable(FacestudioError):
    """The requested inference backend or device cannot be used here (exit 2: a usage problem)."""

    exit_code = 2


class OutOfMemory(FacestudioError):
    """A model call did not fit in memory (RAM, or the GPU's) even at one frame (exit 2: settings beyond the machine).

    Raised by the backends for their allocators' failures, so the pipeline and processors can retry smaller first.
    """

    exit_code = 2


class Cancelled(FacestudioError):
    """The user cancelled the job (Ctrl-C, UI cancel) (exit 4)."""

    exit_code = 4


class MediaError(FacestudioError):
    """ffmpeg failed while decoding or encoding for a reason not caused by the input (exit 1)."""

    exit_code = 1


class InsufficientDiskSpace(InvalidInput):
    """The disks that would hold a job's segments and output have too little free space for it (exit 2)."""


class DiskFull(InsufficientDiskSpace):
    """A disk filled up (or went over its quota) while a file was being written to `folder` (exit 2)."""

    def __init__(self, message: str, folder: Path) -> None:
        super().__init__(message)
        self.folder = folder


class ClusterUnavailable(FacestudioError):
    """`--cluster` cannot be used: Ray is not installed, or the cluster cannot be reached (exit 2)."""

    exit_code = 2


class SegmentFailed(FacestudioError):
    """A segment of a cluster job failed on every attempt its workers were given (exit 1)."""

    exit_code = 1
