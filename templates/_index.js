// Sorting and filtering of the runs table, and the ladder's problem picker. No library, no network.
// The state lives in the URL hash (#rung=v2&sort=tflops:desc) so a filtered view can be linked.
(function () {
  "use strict";
  var table = document.getElementById("runs-table");
  var tbody = table.tBodies[0];
  var rows = Array.prototype.slice.call(tbody.rows);
  var filters = Array.prototype.slice.call(document.querySelectorAll("#filters [data-filter]"));
  var headers = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var state = { sort: null, dir: 1 };

  function cellValue(row, idx, numeric) {
    var v = row.cells[idx].getAttribute("data-v") || "";
    if (!numeric) return v.toLowerCase();
    var x = parseFloat(v);
    return isNaN(x) ? null : x;
  }

  function applySort() {
    if (state.sort === null) return;
    var idx = headers.findIndex(function (h) { return h.dataset.key === state.sort; });
    if (idx < 0) return;
    var numeric = headers[idx].dataset.type === "num";
    var sorted = rows.slice().sort(function (a, b) {
      var x = cellValue(a, idx, numeric), y = cellValue(b, idx, numeric);
      if (x === y) return 0;
      if (x === null) return 1;          // missing values last, whatever the direction
      if (y === null) return -1;
      return (x < y ? -1 : 1) * state.dir;
    });
    sorted.forEach(function (r) { tbody.appendChild(r); });
    headers.forEach(function (h, i) {
      if (i === idx) h.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
      else h.removeAttribute("aria-sort");
    });
  }

  function applyFilter() {
    var want = {};
    filters.forEach(function (f) { want[f.dataset.filter] = f.value.trim(); });
    var shown = 0;
    rows.forEach(function (r) {
      var ok = (!want.rung || r.dataset.rung === want.rung) &&
               (!want.shape || r.dataset.shape === want.shape) &&
               (!want.device || r.dataset.device === want.device) &&
               (!want.text || r.textContent.toLowerCase().indexOf(want.text.toLowerCase()) >= 0);
      r.hidden = !ok;
      if (ok) shown += 1;
    });
    document.getElementById("shown").textContent = shown + " of " + rows.length + " runs shown";
  }

  function writeHash() {
    var parts = [];
    filters.forEach(function (f) { if (f.value) parts.push(f.dataset.filter + "=" + encodeURIComponent(f.value)); });
    if (state.sort) parts.push("sort=" + state.sort + ":" + (state.dir > 0 ? "asc" : "desc"));
    var ladder = document.getElementById("ladder-select");
    if (ladder && ladder.value !== "0") parts.push("ladder=" + ladder.value);
    history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname);
  }

  function readHash() {
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("="), k = kv.slice(0, i), v = decodeURIComponent(kv.slice(i + 1));
      if (k === "sort") {
        var p = v.split(":");
        state.sort = p[0];
        state.dir = p[1] === "desc" ? -1 : 1;
      } else if (k === "ladder") {
        var sel = document.getElementById("ladder-select");
        if (sel) sel.value = v;
      } else {
        filters.forEach(function (f) { if (f.dataset.filter === k) f.value = v; });
      }
    });
  }

  function showLadder() {
    var sel = document.getElementById("ladder-select");
    if (!sel) return;
    document.querySelectorAll(".ladder-group").forEach(function (g) { g.hidden = g.dataset.group !== sel.value; });
  }

  headers.forEach(function (h) {
    h.addEventListener("click", function () {
      state.dir = state.sort === h.dataset.key ? -state.dir : (h.dataset.type === "num" ? -1 : 1);
      state.sort = h.dataset.key;
      applySort();
      writeHash();
    });
  });
  filters.forEach(function (f) { f.addEventListener("input", function () { applyFilter(); writeHash(); }); });
  var ladderSelect = document.getElementById("ladder-select");
  if (ladderSelect) ladderSelect.addEventListener("change", function () { showLadder(); writeHash(); });

  readHash();
  applySort();
  applyFilter();
  showLadder();
  document.documentElement.setAttribute("data-ready", "1");
})();
