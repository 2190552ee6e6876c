// evstore serve: live mode for the run page (server-sent events). Served as a file so the
// Content-Security-Policy can forbid inline script. Rows are built with textContent only.
(function () {
  "use strict";

  function cell(row, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function addRow(body, run, ev) {
    if (document.getElementById("v" + ev.version)) { return; }
    var tr = document.createElement("tr");
    tr.id = "v" + ev.version;
    tr.className = "live-new";
    cell(tr, String(ev.version), "num");
    cell(tr, (ev.when || "").slice(0, 19).replace("T", " "), "nowrap");
    cell(tr, ev.type, "mono");
    var summary = cell(tr, ev.summary, "summary");
    if (ev.findings && ev.findings.length) {
      var ul = document.createElement("ul");
      ul.className = "findings";
      ev.findings.slice(0, 20).forEach(function (f) {
        var li = document.createElement("li");
        li.textContent = "! " + (f.path || "/") + ": [" + f.code + "] " + f.message;
        ul.appendChild(li);
      });
      summary.appendChild(ul);
    }
    var links = cell(tr, "", "nowrap");
    var base = "/runs/" + encodeURIComponent(run);
    var a = document.createElement("a");
    a.href = base + "?version=" + ev.version + "#state";
    a.textContent = "state";
    links.appendChild(a);
    body.appendChild(tr);
  }

  function setup() {
    var table = document.getElementById("timeline");
    var button = document.getElementById("live-toggle");
    if (!table || !button) { return; }
    var status = document.getElementById("live-status");
    var body = table.tBodies[0];
    var run = table.getAttribute("data-run");
    var source = null;
    if (table.getAttribute("data-more") === "1") {
      button.disabled = true;
      button.title = "Live mode follows the end of the run; open its last page.";
      return;
    }
    button.addEventListener("click", function () {
      if (source) {
        source.close();
        source = null;
        button.textContent = "Live: off";
        status.textContent = "";
        return;
      }
      var last = table.getAttribute("data-last") || "0";
      source = new EventSource(button.getAttribute("data-live-url") + "?after=" + encodeURIComponent(last));
      button.textContent = "Live: on";
      status.textContent = "following new events…";
      source.addEventListener("append", function (msg) {
        var ev = JSON.parse(msg.data);
        addRow(body, run, ev);
        table.setAttribute("data-last", String(ev.version));
        status.textContent = "last event: version " + ev.version;
      });
      source.onerror = function () { status.textContent = "reconnecting…"; };
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setup);
  } else {
    setup();
  }
}());
