/* MissionWeave portal: live Mission timeline, lease countdowns, policy preview.
   Vanilla JS, no dependencies; everything it shows comes from the server. */
(function () {
  "use strict";

  // --- lease countdowns -------------------------------------------------------
  function tickCountdowns() {
    var now = Date.now();
    document.querySelectorAll(".countdown[data-expires]").forEach(function (el) {
      var left = Math.max(0, Math.round((Date.parse(el.dataset.expires) - now) / 1000));
      var m = Math.floor(left / 60), s = left % 60;
      el.textContent = left === 0 ? "expired" : (m ? m + " min " : "") + s + " s";
      el.classList.toggle("soon", left < 60);
    });
  }
  setInterval(tickCountdowns, 1000);
  tickCountdowns();

  // --- the live timeline -------------------------------------------------------
  var WORDS = {};  // the portal's EVENT_WORDS (portal/visuals.py), from the page's mission-client JSON

  function describe(ev, goals, names) {
    var body = ev.body || {};
    if (ev.type === "work.authorized" && body.contract) goals[body.workitem] = body.contract.goal;
    var subject = goals[ev.aggregate.id] || "";
    if (ev.type.indexOf("membership.") === 0 && body.agent) subject = names[body.agent] || body.agent.slice(0, 8);
    var roles = (body.roles || []).join(", ");
    var text = { "membership.added": "added as " + roles, "membership.removed": "removed",
                 "membership.roles_set": "now " + roles }[ev.type] ||
      WORDS[ev.type] || ev.type.split(".").slice(1).join(".").replace(/_/g, " ");
    var detail = body.note || body.reason || body.resolution_required || "";
    if (!detail && Array.isArray(body.evidence) && body.evidence.length) detail = body.evidence[body.evidence.length - 1].summary || "";
    var line = [subject, text].filter(Boolean).join(" — ");
    return detail ? line + ": " + detail : line;
  }

  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined) n.textContent = text;
    return n;
  }

  function startMission(cfg) {
    WORDS = cfg.words || {};
    var list = document.getElementById("timeline");
    var live = document.getElementById("live");
    var last = cfg.after;
    var refreshTimer = null;
    var backoff = 500;

    function refresh() {
      clearTimeout(refreshTimer);
      refreshTimer = setTimeout(function () {
        fetch(cfg.live_url, { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (parts) {
            if (!parts) return;
            Object.keys(parts).forEach(function (id) {
              var target = document.getElementById(id);
              if (target) target.innerHTML = parts[id];
            });
            tickCountdowns();
          });
      }, 200);
    }

    function add(ev) {
      if (ev.sequence <= last) return;
      last = ev.sequence;
      var empty = list.querySelector(".empty-tl");
      if (empty) empty.remove();
      var li = el("li", "ev fresh");
      li.dataset.seq = ev.sequence;
      li.dataset.type = ev.type;
      li.appendChild(el("span", "dot t-" + ev.type.slice(0, 4)));
      var box = el("div");
      var head = el("div", "ev-head");
      head.appendChild(el("code", "etype", ev.type));
      head.appendChild(el("span", "seq", "#" + ev.sequence));
      box.appendChild(head);
      box.appendChild(el("div", "ev-text", describe(ev, cfg.goals, cfg.names)));
      var when = new Date(ev.occurred_at);
      box.appendChild(el("div", "ev-meta small muted", (cfg.names[ev.actor] || ev.actor.slice(0, 8)) + " · " + when.toISOString().slice(11, 19)));
      li.appendChild(box);
      list.insertBefore(li, list.firstChild);
      setTimeout(function () { li.classList.remove("fresh"); }, 2500);
      refresh();
    }

    function connect() {
      var proto = location.protocol === "https:" ? "wss:" : "ws:";
      var ws = new WebSocket(proto + "//" + location.host + "/ws/v1/ui/groups/" + cfg.group + "?after=" + last);
      ws.onopen = function () { live.classList.remove("off"); live.classList.add("on"); backoff = 500; };
      ws.onmessage = function (msg) {
        var frame = JSON.parse(msg.data);
        if (frame.op === "event") add(frame.event);
      };
      ws.onclose = function (e) {
        live.classList.remove("on"); live.classList.add("off");
        if (e.code === 4003 || e.code === 4008) return; // signed out or not a member: do not retry
        setTimeout(connect, backoff);
        backoff = Math.min(backoff * 2, 10000);
      };
    }
    connect();
  }

  // --- the policy preview --------------------------------------------------------
  function startPolicy(form) {
    function recompute() {
      var weights = {};
      form.querySelectorAll("#classes tbody tr").forEach(function (tr) {
        var name = tr.querySelector(".class-name").value.trim();
        var w = parseFloat(tr.querySelector(".class-weight").value);
        if (name && w > 0) weights[name] = w;
      });
      var dflt = form.querySelector("#default-class").value.trim();
      var rows = [], total = 0;
      form.querySelectorAll(".group-row").forEach(function (tr) {
        var cls = tr.querySelector(".group-class").value.trim() || dflt;
        var w = weights[cls] || 0;
        rows.push({ id: tr.dataset.group, cls: cls, w: w });
        total += w;
      });
      rows.forEach(function (r) {
        var box = document.querySelector('.share[data-group="' + r.id + '"]');
        if (!box) return;
        var pct = total ? Math.round(1000 * r.w / total) / 10 : 0;
        box.querySelector(".pct").textContent = pct + "%";
        box.querySelector(".share-bar").value = pct;  // a <progress>: no style attribute under the CSP
        box.querySelector(".cls").textContent = (r.cls || "?") + " · weight " + r.w;
      });
    }
    form.addEventListener("input", recompute);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var cfg = document.getElementById("mission-client");
    if (cfg) startMission(JSON.parse(cfg.textContent));
    var policy = document.getElementById("policy-form");
    if (policy) startPolicy(policy);
  });
})();
