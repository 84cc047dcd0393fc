// The studio page's browser side, run once by Gradio as the js_on_load of the hidden #page-script HTML (webui/page.py):
// - the responsible-use consent, once ticked, is kept by this browser (localStorage) and ticked again on reload;
// - the target's player shows the frame the slider shows, whether the slider moved by mouse, keys or a typed
//   number; a seek in the paused player moves the slider (and so the preview) to the frame it shows;
// - links "#cell:ID" open that processor's cell, "#models:ID" open the Models tab searching for that model.
if (!window.facestudioPage) {
  const P = (window.facestudioPage = {});
  const $ = (selector) => document.querySelector(selector);
  const KEY = "facestudio-consent";

  const keepConsent = () => {
    const box = $("#consent input[type=checkbox]");
    if (!box) return setTimeout(keepConsent, 200);
    box.addEventListener("change", () => localStorage.setItem(KEY, box.checked ? "yes" : "no"));
    if (localStorage.getItem(KEY) === "yes" && !box.checked) box.click();
  };
  keepConsent();

  // The player is put in the middle of the frame's slot at the video's rate (#target-fps, set with the target).
  const rate = () => parseFloat(($("#target-fps textarea, #target-fps input") || {}).value || "");
  const player = () => $("#target-video video");
  P.show = (index) => {
    const video = player();
    const fps = rate();
    if (video && fps > 0) video.currentTime = (index + 0.5) / fps;
  };
  document.addEventListener(
    "input",
    (event) => {
      const field = event.target;
      if (!field.closest || !field.closest("#frame")) return;
      const index = parseInt(field.value, 10);
      if (!Number.isNaN(index)) P.show(index);
    },
    true,
  );
  // Media events do not bubble: caught on the way down.
  document.addEventListener(
    "seeked",
    (event) => {
      const video = event.target;
      if (!(video instanceof HTMLVideoElement) || !video.closest("#target-video") || !video.paused) return;
      const fps = rate();
      const number = $("#frame input[type=number]");
      if (!(fps > 0) || !number) return;
      const index = Math.min(Math.floor(video.currentTime * fps), parseInt(number.max, 10) || 0);
      if (parseInt(number.value, 10) === index) return;
      number.value = String(index);
      number.dispatchEvent(new Event("input", { bubbles: true }));
    },
    true,
  );

  const openCell = (id) => {
    const cell = document.getElementById(`cell-${id}`);
    if (!cell) return;
    const content = cell.querySelector("[data-testid=accordion-content]");
    if (content && content.style.display === "none") cell.querySelector(".label-wrap")?.click();
    cell.scrollIntoView({ block: "start" });
  };
  const openModels = (id) => {
    const tab = [...document.querySelectorAll("[role=tab]")].find((t) => t.textContent.trim() === "Models");
    tab?.click();
    const search = () => {
      const field = $("#models-search textarea, #models-search input");
      if (!field) return setTimeout(search, 100);
      field.value = id;
      field.dispatchEvent(new Event("input", { bubbles: true }));
    };
    search();
  };
  document.addEventListener(
    "click",
    (event) => {
      const link = event.target.closest && event.target.closest("a[href^='#cell:'], a[href^='#models:']");
      if (!link) return;
      event.preventDefault();
      const [kind, id] = link.getAttribute("href").slice(1).split(":");
      (kind === "cell" ? openCell : openModels)(id);
    },
    true,
  );
}
