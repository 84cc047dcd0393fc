"""The studio's Models tab: every model of the catalogue with its task, size, licence (summary and full text) and
whether it is here; Download (sha256-checked, resumable, with progress) and a check of the downloaded files."""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from engine.models.licences import licence_texts
from engine.models.licences import summary as licence_summary
from engine.serve.service import Service
from webui.studio import user_message

log = logging.getLogger(__name__)


class ModelsTab:
    """Builds the Models tab's rows (when the tab is opened) and downloads and verifies models."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def build(self, tab: gr.Tab) -> None:
        self.version = gr.State(0)
        with gr.Row():
            gr.Markdown("Every model in the catalogue. Downloads are sha256-checked and resumable.")
            self.verify = gr.Button("Verify downloaded files", size="sm", scale=0, min_width=180)
        self.status = gr.Markdown(elem_id="models-status")

        @gr.render(inputs=[self.version], triggers=[tab.select, self.version.change])
        def show(version: int) -> None:
            self._rows()

    def wire(self) -> None:
        self.verify.click(self.on_verify, None, [self.status], concurrency_id="download")

    def _rows(self) -> None:
        for status in self.service.catalogue.statuses():
            megabytes = None if status.size is None else f"{status.size / 1e6:,.0f} MB"
            if status.availability == "embedded":
                size = "embedded" + (f" (original {megabytes})" if megabytes else "")
            else:
                size = megabytes or "size unknown"
            use = "commercial use OK" if status.commercial_use else "**non-commercial**"
            with gr.Row(equal_height=False, elem_classes="fs-model"):
                with gr.Column(scale=5):
                    gr.Markdown(
                        f"**{status.id}** — {status.title} · {status.task} · {size} · {use}",
                        elem_id=f"model-{status.id}",
                    )
                    with gr.Accordion(f"licence: {status.licence}", open=False):
                        texts = licence_texts(status.licence, status.homepage)
                        body = "\n\n---\n\n".join(f"### {t.title}\n\n```text\n{t.text}\n```" for t in texts)
                        gr.Markdown(f"{licence_summary(status.licence, status.homepage)}\n\n{body}")
                with gr.Column(scale=2, min_width=200):
                    row_status = gr.Markdown(status.availability, elem_id=f"model-status-{status.id}")
                    if status.downloadable:
                        label = "Download original" if status.availability == "embedded" else "Download"
                        button = gr.Button(label, size="sm", elem_id=f"model-download-{status.id}")
                        button.click(
                            self.download(status.id), None, [row_status], concurrency_id="download",
                            concurrency_limit=2,
                        )  # fmt: skip

    def download(self, model_id: str) -> Any:
        """The handler of a model's Download button: fetches it with a progress bar; says in its row how it went."""

        def download(progress: gr.Progress = gr.Progress()) -> str:
            def bar(item: Any) -> Any:
                return lambda done, total: progress((done, total), desc=item.filename, unit="B")

            try:
                paths = self.service.catalogue.fetch([model_id], progress=bar, say=log.info)
            except Exception as exc:
                log.info("download of %s failed: %s", model_id, exc)
                return f"<span class='fs-warn'>download failed: {user_message(exc, {})}</span>"
            return f"downloaded: {', '.join(p.name for p in paths) or 'nothing to download'}"

        return download

    def on_verify(self) -> str:
        rows = [r for r in self.service.catalogue.verify() if r.status != "missing"]
        if not rows:
            return "no model files here to check"
        return "\n".join(
            f"- {'ok' if r.status == 'ok' else '**' + r.status + '**'}: {r.model} ({r.path.name})" for r in rows
        )
