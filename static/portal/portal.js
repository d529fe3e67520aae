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
  // The UI socket (/ws/ui/groups/{id}) carries the Group's signed Event
  // documents (PROTOCOL §15.2) in EVENT frames (§17); the page renders their
  // normative kinds and payloads the way portal/visuals.py describes them.
  var WORDS = {};  // the portal's EVENT_WORDS (portal/visuals.py), from the page's mission-client JSON
  var URN = "urn:uuid:";

  function bare(id) {
    return typeof id === "string" && id.indexOf(URN) === 0 ? id.slice(URN.length) : id || "";
  }

  function itemOf(ev) {
    var p = ev.payload || {};
    return bare(ev.workItemId || p.workItemId || (p.workItem && p.workItem.workItemId) || "");
  }

  function describe(ev, goals, names) {
    var p = ev.payload || {};
    if (ev.kind === "work.authorized" && p.workItem && p.workItem.contract) {
      goals[bare(p.workItem.workItemId)] = p.workItem.contract.goal;
    }
    var subject = goals[itemOf(ev)] || "";
    var text = WORDS[ev.kind] || ev.kind.split(".").slice(1).join(" ").replace(/_/g, " ");
    if (ev.kind === "membership.changed" && p.membership) {
      var who = bare(p.membership.member.id);
      subject = names[who] || who.slice(0, 8);
      text = "now " + p.membership.role;
    } else if (ev.kind === "membership.ended" && p.principal) {
      var gone = bare(p.principal.id);
      subject = names[gone] || gone.slice(0, 8);
    } else if (ev.kind === "mission.created" && p.mission) {
      subject = (p.mission.objective || "").slice(0, 80);
    }
    var said = "";
    if (ev.kind === "message.posted" || ev.kind === "message.corrected") {
      // Context, never an assignment (§9); a redacted Message is served without content (§7.4).
      var content = p.message ? p.message.content : p.replacementContent;
      said = (content || []).filter(function (c) { return c && c.type === "text"; })
        .map(function (c) { return c.text; }).join(" ").slice(0, 300) || "content withheld";
    }
    var detail = said || p.reason || p.feedback || p.resolution || (p.approval && p.approval.comments) || "";
    if (!detail && Array.isArray(p.evidence) && p.evidence.length) detail = p.evidence[p.evidence.length - 1].method || "";
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
      if (typeof ev.sequence !== "number" || typeof ev.kind !== "string" || ev.sequence <= last) return;
      last = ev.sequence;
      var empty = list.querySelector(".empty-tl");
      if (empty) empty.remove();
      var li = el("li", "ev fresh");
      li.dataset.seq = ev.sequence;
      li.dataset.kind = ev.kind;
      li.dataset.eventId = ev.eventId;
      li.appendChild(el("span", "dot t-" + ev.kind.slice(0, 4)));
      var box = el("div");
      var head = el("div", "ev-head");
      head.appendChild(el("code", "etype", ev.kind));
      head.appendChild(el("span", "seq", "#" + ev.sequence));
      box.appendChild(head);
      box.appendChild(el("div", "ev-text", describe(ev, cfg.goals, cfg.names)));
      var actor = bare(ev.actor && ev.actor.id);
      var when = new Date(ev.occurredAt);
      box.appendChild(el("div", "ev-meta small muted", (cfg.names[actor] || actor.slice(0, 8)) + " · " + when.toISOString().slice(11, 19)));
      li.appendChild(box);
      list.insertBefore(li, list.firstChild);
      setTimeout(function () { li.classList.remove("fresh"); }, 2500);
      refresh();
    }

    function connect() {
      var proto = location.protocol === "https:" ? "wss:" : "ws:";
      var ws = new WebSocket(proto + "//" + location.host + cfg.socket_path + "?afterSequence=" + last);
      ws.onopen = function () { live.classList.remove("off"); live.classList.add("on"); backoff = 500; };
      ws.onmessage = function (msg) {
        if (typeof msg.data !== "string") return;  // §17.1: a protocol object is never binary
        var frame = JSON.parse(msg.data);
        if (frame.frameType === "EVENT" && frame.event) add(frame.event);
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
