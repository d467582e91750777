// Live refresh of the console's pages, without inline script (the CSP allows only this file).
// Every data-refresh seconds the page is fetched again and the #live region replaced with the
// new one. The HTML comes from this console, already escaped by its templates; DOMParser does
// not run scripts, and nothing here builds markup from strings.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || !live.dataset.refresh) return;
  const seconds = Number(live.dataset.refresh);
  if (!(seconds > 0)) return;
  let busy = false;
  async function refresh() {
    if (busy || document.hidden) return;
    const focused = document.activeElement;
    if (focused && live.contains(focused) && focused.matches("input, select, textarea")) return;  // typing
    busy = true;
    try {
      const response = await fetch(window.location.href, {credentials: "same-origin", cache: "no-store"});
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("live");
      if (fresh) {
        live.replaceChildren(...Array.from(fresh.childNodes, (node) => document.importNode(node, true)));
        live.dataset.refreshed = String(Date.now());
      }
    } catch (error) {
      // The console restarting or the network down: try again at the next tick.
    } finally {
      busy = false;
    }
  }
  window.setInterval(refresh, seconds * 1000);
})();
