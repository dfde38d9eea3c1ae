// npu-advisor dashboard: copy buttons, live progress and the upload form. No framework, no external assets.
// Every page works without it (forms post to the server; pages just don't update). With it, the upload form
// sends its fields straight to the API (the form's data-api) instead of to the page's own POST /upload.
"use strict";

const TERMINAL = new Set(["done", "failed", "cancelled"]);

function copyWithSelection(text) {
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  return copied;
}

function copyText(text) {
  // The async clipboard API needs permission (and a secure context); fall back to a selection copy.
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(text).then(() => true, () => copyWithSelection(text));
  }
  return Promise.resolve(copyWithSelection(text));
}

function setupCopyButtons() {
  for (const button of document.querySelectorAll("button[data-copy-target]")) {
    button.hidden = false;
    button.addEventListener("click", () => {
      const target = document.getElementById(button.dataset.copyTarget);
      copyText(target ? target.textContent : "").then((copied) => {
        const label = button.textContent;
        button.textContent = copied ? "Copied" : "Select and copy by hand";
        setTimeout(() => { button.textContent = label; }, 1500);
      });
    });
  }
}

function applyProgress(id, state) {
  for (const el of document.querySelectorAll(`[data-live="${id}"]`)) {
    const badge = el.querySelector("[data-live-status]");
    if (badge) { badge.textContent = state.status; badge.className = `badge ${state.status}`; }
    const bar = el.querySelector("progress");
    if (bar) {
      bar.hidden = TERMINAL.has(state.status);
      if (state.progress !== null && state.progress !== undefined) bar.value = state.progress;
      bar.textContent = `${Math.round((state.progress || 0) * 100)}%`;
    }
    const stage = el.querySelector("[data-live-stage]");
    if (stage) stage.textContent = state.stage || "";
    // only a queued analysis has a place in the queue: a running one's position is gone, not stale
    const position = el.querySelector("[data-live-position]");
    if (position) {
      position.hidden = !state.queue_position;
      position.textContent = state.queue_position ? `position ${state.queue_position} in the queue` : "";
    }
  }
}

function setupLiveProgress() {
  const ids = new Set([...document.querySelectorAll("[data-live]")].map((el) => el.dataset.live));
  if (!ids.size) return;
  const reloadOnDone = document.body.dataset.reloadOnDone === "true";
  // a detail page without measurements reloads when they arrive: a ranking comes before the job ends
  const shownMeasured = document.body.dataset.measured !== "false";
  const tick = async () => {
    if (!ids.size) return;
    let states;
    try {
      const response = await fetch(`/web/progress?ids=${[...ids].join(",")}`, { credentials: "same-origin" });
      if (!response.ok) return setTimeout(tick, 5000);
      states = await response.json();
    } catch (error) {
      return setTimeout(tick, 5000);
    }
    let finished = false;
    for (const [id, state] of Object.entries(states)) {
      applyProgress(id, state);
      if (TERMINAL.has(state.status) || (state.measured && !shownMeasured)) { ids.delete(id); finished = true; }
    }
    if (finished && reloadOnDone) { window.location.reload(); return; }
    setTimeout(tick, 1500);
  };
  setTimeout(tick, 1000);
}

class FieldError extends Error {
  constructor(field, message) { super(message); this.field = field; }
}

function contextFromForm(form) {
  // Fields named "ctx.<name>"; empty ones are left out so the context's defaults apply.
  const context = {};
  for (const el of form.querySelectorAll("[name^='ctx.']")) {
    const name = el.name.slice(4);
    const kind = el.dataset.kind;
    if (kind === "checkbox") { context[name] = el.checked; continue; }
    const raw = el.value.trim();
    if (raw === "") continue;
    if (kind === "integer" || kind === "number") context[name] = Number(raw);
    else if (kind === "jsonl" && !raw.startsWith("[")) context[name] = raw;  // JSON Lines: the API parses them
    else if (kind === "json" || kind === "jsonl") {
      try { context[name] = JSON.parse(raw); } catch (error) { throw new FieldError(name, "not valid JSON"); }
    } else context[name] = raw;
  }
  return context;
}

function showErrors(form, errors, message) {
  for (const el of form.querySelectorAll(".error")) el.textContent = "";
  const summary = form.querySelector(".form-error");
  const unplaced = [];
  for (const { field, message: text } of errors) {
    const key = String(field || "").replace(/^context\./, "").split(".")[0];
    const slot = form.querySelector(`[data-error-for="${CSS.escape(key)}"]`);
    if (slot) slot.textContent = text;
    else unplaced.push(`${field || "form"}: ${text}`);
  }
  summary.textContent = [message, ...unplaced].filter(Boolean).join(" ");
  summary.focus();
}

async function submitUpload(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const button = form.querySelector("button[type=submit]");
  const data = new FormData();
  try {
    data.append("context", JSON.stringify(contextFromForm(form)));
  } catch (error) {
    if (error instanceof FieldError) return showErrors(form, [{ field: error.field, message: error.message }], "Fix the fields marked below.");
    throw error;
  }
  const name = form.querySelector("input[name=model_name]").value.trim();
  if (name) data.append("model_name", name);
  const tag = form.querySelector("input[name=tag]").value.trim();
  if (tag) data.append("tag", tag);
  if (form.querySelector("input[name=force]").checked) data.append("force", "true");
  const backends = form.querySelector("input[name=backends]").value.trim();
  if (backends) data.append("backends", backends);
  const inputs = form.querySelector("input[name=inputs]").files[0];
  if (inputs) data.append("inputs", inputs);
  const calibration = form.querySelector("input[name=calibration]").files[0];
  if (calibration) data.append("calibration", calibration);
  const model = form.querySelector("input[name=model]").files[0];
  if (!model) return showErrors(form, [{ field: "model", message: "choose a model file" }], "A model file is required.");
  data.append("model", model);  // last: the server has every text field before the large file arrives
  button.disabled = true;
  button.textContent = "Uploading…";
  try {
    const response = await fetch(form.dataset.api, { method: "POST", body: data, credentials: "same-origin" });
    const body = await response.json().catch(() => ({}));
    if (response.ok && body.id !== undefined) { window.location.href = `/analyses/${body.id}`; return; }
    const detail = body.detail;
    if (Array.isArray(detail)) showErrors(form, detail, "The server rejected some fields.");
    else showErrors(form, [], `${response.status}: ${typeof detail === "string" ? detail : response.statusText}`);
  } catch (error) {
    showErrors(form, [], `Upload failed: ${error.message}`);
  }
  button.disabled = false;
  button.textContent = "Analyse";
}

document.addEventListener("DOMContentLoaded", () => {
  setupCopyButtons();
  setupLiveProgress();
  const upload = document.getElementById("upload-form");
  if (upload) upload.addEventListener("submit", submitUpload);
});
