"""The studio's run: consent, Run / Cancel / Preview, the progress line (`RunState`), the result with its summary
and downloads, and the same run as one named API endpoint for scripts (gradio_client)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from engine.core import consent
from engine.core.errors import Cancelled, FacestudioError
from webui import uploads
from webui.jobs import parse_preset_text
from webui.parts import Page
from webui.schedule import Place
from webui.studio import user_message
from webui.summary import report_json, summary

log = logging.getLogger(__name__)

# What the pipeline's progress stages are called on the page.
_STAGES = {"frames": "rendering"}


def _ordinal(n: int) -> str:
    return f"{n}{'tsnrhtdd'[(n // 10 % 10 != 1) * (n % 10 < 4) * n % 10 :: 4]}"


def _seconds(value: float) -> str:
    value = max(value, 0.0)
    return f"{value:.0f} s" if value < 90 else f"{value / 60:.0f} min"


class RunState:
    """What a running job shows: its place in line while it waits, then its stage, frames, fps and ETA
    (`engine.core.progress.Progress`; raises Cancelled between batches once the session's cancel flag is set)."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.place: Place | None = None
        self.stage_name = ""
        self.total: int | None = None
        self.done = 0
        self.started: float | None = None
        self._lock = threading.Lock()

    def queued(self, place: Place) -> None:
        self.place = place

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        with self._lock:
            self.place = None
            self.stage_name, self.total, self.done, self.started = name, total, 0, time.monotonic()

    def advance(self, n: int = 1) -> None:
        if self.cancel.is_set():
            raise Cancelled("cancelled from the UI; nothing was written")
        with self._lock:
            self.done += n

    def close(self) -> None:
        pass

    def text(self) -> str:
        """One line of Markdown for the status panel."""
        with self._lock:
            place, stage, total, done, started = self.place, self.stage_name, self.total, self.done, self.started
        if self.cancel.is_set():
            return "cancelling…"
        if place is not None:
            wait = "wait unknown until a job here has run" if place.wait is None else f"about {_seconds(place.wait)}"
            return f"waiting: {_ordinal(place.ahead)} in line — {wait}"
        if not stage:
            return "preparing: checking the inputs, loading models, analysing the source face"
        if total and done >= total:
            return f"finishing: {done} of {total} frames done — writing the output, audio and sidecar"
        elapsed = time.monotonic() - (started or time.monotonic())
        fps = done / elapsed if elapsed > 0 and done else 0.0
        counts = f"{done} of {total}" if total else f"{done}"
        eta = f", about {_seconds((total - done) / fps)} left" if fps and total else ""
        return f"{_STAGES.get(stage, stage)}: {counts} frames, {fps:.2f} fps{eta}"


class RunPanel:
    """Builds consent, the buttons, the progress line and the result into the page's right column, under the
    preview; runs a job for the session and shows what it made."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self) -> None:
        self.agreed = gr.Checkbox(
            label="I have read the responsible-use notice and have the consent of the people shown",
            info=consent.NOTICE,
            value=False,
            elem_id="consent",
        )
        with gr.Row():
            self.run = gr.Button("Run", variant="primary", elem_id="run", scale=2)
            self.cancel = gr.Button("Cancel", variant="stop", elem_id="cancel", scale=1)
            self.preview_btn = gr.Button("Preview", elem_id="preview-btn", scale=1)
        # Several targets in one upload: each a job of its own, in turn, each into the history.
        self.batch = uploads.UploadButton(
            "Run on several targets…", file_count="multiple", file_types=["image", "video"], elem_id="run-batch",
            size="sm",
        )  # fmt: skip
        self.status = gr.Markdown(elem_id="status", elem_classes="fs-status")
        self.result_image = gr.Image(
            label="result", type="filepath", interactive=False, visible=False, elem_id="result-image"
        )
        self.result_video = gr.Video(label="result", interactive=False, visible=False, elem_id="result-video")
        self.result_summary = gr.Markdown(elem_id="summary")
        self.downloads = gr.File(
            label="output and job sidecar", file_count="multiple", visible=False, elem_id="downloads"
        )

    def wire(self) -> None:
        page, inputs = self.page, self.page.inputs
        run_out = [
            self.status, self.result_image, self.result_video, self.result_summary, self.downloads,
            page.preview.compare, page.history.version,
        ]  # fmt: skip
        self.run.click(
            self.on_run,
            [self.agreed, inputs.target, inputs.sources, inputs.frame_index, page.history.version,
             *page.settings.components],
            run_out, concurrency_limit=None, show_progress="hidden",
        )  # fmt: skip
        self.cancel.click(self.on_cancel, None, [self.status], queue=False)
        self.batch.upload(
            self.on_batch,
            [self.agreed, self.batch, inputs.sources, page.history.version, *page.settings.components],
            [self.status, self.result_summary, page.history.version], concurrency_limit=None, show_progress="hidden",
        )  # fmt: skip

    def on_run(
        self,
        agreed: bool,
        target: str | None,
        sources: list[str] | None,
        index: float,
        version: int,
        request: gr.Request,
        *values: Any,
    ) -> Iterator[tuple[Any, ...]]:
        keep = (gr.update(),) * 6
        if not agreed:
            gr.Warning("tick the responsible-use notice before running")
            yield ("tick the responsible-use notice (above Run) before running", *keep)
            return
        session = self.page.session(request)
        state = RunState(session.cancel)
        result: dict[str, Any] = {}
        raw = self.page.settings.raw_from(values)

        def work() -> None:
            try:
                job_raw, job_sources = self.page.people.apply(session, raw, target, sources or [])
                result["done"] = self.studio.run_for(session, job_raw, target or "", job_sources, state, state.queued)
            except BaseException as exc:  # reported by the generator below, in the status panel
                result["error"] = exc

        session.cancel.clear()
        worker = threading.Thread(target=work, name="facestudio-ui-run", daemon=True)
        worker.start()
        hidden = gr.update(value=None, visible=False)
        yield (state.text(), hidden, hidden, "", hidden, gr.update(), gr.update())
        while worker.is_alive():
            worker.join(0.5)
            yield (state.text(), *keep)
        error = result.get("error")
        if isinstance(error, Cancelled):
            yield ("**cancelled** — nothing was written", *keep)
            return
        if error is not None:
            if not isinstance(error, FacestudioError):
                log.error("run failed", exc_info=error)
            message = user_message(error, session.names)
            gr.Warning(message)
            yield (f"<span class='fs-warn'>**failed** — {message}</span>", *keep)
            return
        report, entry = result["done"]
        is_image = report.kind == "image"
        output = self.studio.share(session, report.output)
        player = None if is_image else self.studio.playable(session, report.output)
        compare = gr.update()
        try:
            compare = self.studio.compare_after_run(session, target or "", report, int(index))
        except FacestudioError as exc:
            log.info("no before/after after the run: %s", exc)
        done = f"done in {report.seconds:.1f} s"
        if not is_image and player is None:
            done += " — its codec does not play in browsers: download it to watch"
        yield (
            done,
            gr.update(value=output if is_image else None, visible=is_image),
            gr.update(value=player, visible=player is not None),
            summary(report),
            gr.update(value=[output, self.studio.share(session, report.sidecar)], visible=True),
            compare,
            version + 1,
        )

    def on_batch(
        self,
        agreed: bool,
        targets: list[str] | None,
        sources: list[str] | None,
        version: int,
        request: gr.Request,
        *values: Any,
    ) -> Iterator[tuple[Any, ...]]:
        """Several targets of one upload run as jobs in turn with the current settings (`Studio.run_batch`), each
        into the history; the status follows the job running, the summary says what each did."""
        if not agreed:
            gr.Warning("tick the responsible-use notice before running")
            yield "tick the responsible-use notice (above Run) before running", gr.update(), gr.update()
            return
        session = self.page.session(request)
        files = list(targets or [])
        self.studio.note_upload(session, "batch", files)
        raw = self.page.settings.raw_from(values)
        states: list[tuple[int, str, RunState]] = []
        result: dict[str, Any] = {}

        def progress(n: int, name: str) -> RunState:
            states.append((n, name, RunState(session.cancel)))
            return states[-1][2]

        def work() -> None:
            try:
                result["done"] = self.studio.run_batch(
                    session, files, lambda t: self.page.people.apply(session, raw, t, sources or []), progress
                )
            except BaseException as exc:  # reported below, in the status panel
                result["error"] = exc

        session.cancel.clear()
        worker = threading.Thread(target=work, name="facestudio-ui-batch", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            if states:
                n, name, state = states[-1]
                yield f"job {n} of {len(files)} ({name}): {state.text()}", gr.update(), gr.update()
        error = result.get("error")
        if error is not None:
            message = "cancelled" if isinstance(error, Cancelled) else user_message(error, session.names)
            yield f"<span class='fs-warn'>**stopped** — {message}</span>", gr.update(), version + 1
            return
        lines = []
        for target, outcome in result["done"]:
            name = self.studio.name(session, target)
            if isinstance(outcome, FacestudioError):
                lines.append(f"- {name}: **failed** — {user_message(outcome, session.names)}")
            else:
                report = outcome[0]
                lines.append(f"- {name}: done in {report.seconds:.1f} s → {self.studio.name(session, report.output)}")
        failed = sum(isinstance(o, FacestudioError) for _, o in result["done"])
        head = f"{len(files) - failed} of {len(files)} targets done" + (f", {failed} failed" if failed else "")
        yield f"**{head}** — each is in the History tab", "\n".join(lines), version + 1

    def on_cancel(self, request: gr.Request) -> str:
        self.page.session(request).cancel.set()
        return "cancelling…"

    # -- the API: one named endpoint for scripts (gradio_client) ------------------------------------------------
    def api(self) -> None:
        """The `run` endpoint (built last in the page's Blocks, hidden)."""
        api_target = uploads.File(label="target", visible=False)
        api_sources = uploads.File(label="sources", file_count="multiple", visible=False)
        api_settings = gr.Textbox(label="preset", visible=False)
        api_agreed = gr.Checkbox(label="consent", visible=False)
        api_output = gr.File(label="output", visible=False)
        api_sidecar = gr.File(label="sidecar", visible=False)
        api_report = gr.JSON(label="report", visible=False)

        def api_run(
            target: str | None, sources: list[str] | None, preset_text: str, agreed: bool, request: gr.Request
        ) -> tuple[str, str, dict[str, Any]]:
            """Run a job: target file, source files, the preset as TOML or JSON text (empty: default), and
            consent (must be true). Returns the output, its job sidecar and the run report."""
            if not agreed:
                raise gr.Error("consent must be true: acknowledge the responsible-use notice", print_exception=False)
            session = self.page.session(request)
            try:
                report, _ = self.studio.run_for(
                    session, parse_preset_text(preset_text), target or "", sources or [], RunState(session.cancel)
                )
            except Exception as exc:
                if not isinstance(exc, FacestudioError):
                    log.error("API run failed", exc_info=exc)
                raise gr.Error(user_message(exc, session.names), print_exception=False) from None
            return (
                self.studio.share(session, report.output),
                self.studio.share(session, report.sidecar),
                report_json(report),
            )

        gr.Button(visible=False).click(
            api_run,
            [api_target, api_sources, api_settings, api_agreed],
            [api_output, api_sidecar, api_report],
            api_name="run",
            concurrency_limit=None,
        )
