// Reload the part of the page marked data-refresh="SECONDS" from the server, in place (no build step, no deps).
// Boxes a person ticked in that part stay ticked across reloads (the runs to compare).
"use strict";
document.querySelectorAll("[data-refresh]").forEach((part) => {
  const seconds = Number(part.dataset.refresh) || 5;
  setInterval(async () => {
    try {
      const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById(part.id);
      if (!fresh) return;
      const ticked = new Set([...part.querySelectorAll("input[type=checkbox]:checked")].map((box) => box.value));
      part.innerHTML = fresh.innerHTML;
      part.querySelectorAll("input[type=checkbox]").forEach((box) => { box.checked = ticked.has(box.value); });
    } catch (_) {
      // The server is away for a moment (restarting): the next tick tries again.
    }
  }, seconds * 1000);
});
