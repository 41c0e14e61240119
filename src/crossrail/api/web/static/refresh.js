// Reload the part of the page marked data-refresh="SECONDS" from the server, in place (no build step, no deps).
"use strict";
document.querySelectorAll("[data-refresh]").forEach((part) => {
  const seconds = Number(part.dataset.refresh) || 5;
  setInterval(async () => {
    try {
      const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById(part.id);
      if (fresh) part.innerHTML = fresh.innerHTML;
    } catch (_) {
      // The server is away for a moment (restarting): the next tick tries again.
    }
  }, seconds * 1000);
});
