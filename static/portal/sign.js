/* MissionWeave portal: people sign their own Commands in this browser (DESIGN §4, issue 19).

   - On a person's first sign-in in a browser, a non-extractable WebCrypto
     Ed25519 key pair is made and kept in IndexedDB; only its public half is
     sent to the portal, which binds it to the person in the Registry
     (portal/signing.py). A new device is a new key ID.
   - Every form that issues a Command carries the Command's context from the
     server (a JSON block named by the form's data-command). The page adds
     what the person typed, builds the Command document (PROTOCOL §15.1),
     signs its RFC 8785 (JCS) bytes without the top-level "signature" (§6.4)
     and POSTs it to /api/v0.1/commands, where it is verified like any other.
   Vanilla JS, no inline code (the portal's Content-Security-Policy). */
(function () {
  "use strict";

  var DB = "mwp-keys", STORE = "keys", URN = "urn:uuid:";

  // --- base64url and JCS -------------------------------------------------------
  function b64url(bytes) {
    var s = "", a = new Uint8Array(bytes);
    for (var i = 0; i < a.length; i++) s += String.fromCharCode(a[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // RFC 8785: members sorted by their UTF-16 code units (JS's default sort),
  // strings and numbers as ECMAScript's JSON.stringify writes them.
  function jcs(value) {
    if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
    if (typeof value === "number") {
      if (!isFinite(value)) throw new Error("JCS has no " + value);
      return JSON.stringify(value);
    }
    if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
    if (typeof value === "object") {
      return "{" + Object.keys(value).filter(function (k) { return value[k] !== undefined; }).sort()
        .map(function (k) { return JSON.stringify(k) + ":" + jcs(value[k]); }).join(",") + "}";
    }
    throw new Error("JCS cannot write a " + typeof value);
  }

  function signingBytes(doc) {
    var body = {};
    Object.keys(doc).forEach(function (k) { if (k !== "signature") body[k] = doc[k]; });
    return new TextEncoder().encode(jcs(body));
  }

  function newUrn() { return URN + crypto.randomUUID(); }

  // RFC 3339 UTC with "Z" (§2); microseconds as the portal writes them.
  function now() { return new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z"); }

  // --- the key in IndexedDB ------------------------------------------------------
  function db() {
    return new Promise(function (resolve, reject) {
      var req = indexedDB.open(DB, 1);
      req.onupgradeneeded = function () { req.result.createObjectStore(STORE, { keyPath: "principal" }); };
      req.onsuccess = function () { resolve(req.result); };
      req.onerror = function () { reject(req.error); };
    });
  }

  function stored(principal) {
    return db().then(function (d) {
      return new Promise(function (resolve, reject) {
        var req = d.transaction(STORE).objectStore(STORE).get(principal);
        req.onsuccess = function () { resolve(req.result || null); };
        req.onerror = function () { reject(req.error); };
      });
    });
  }

  function keep(record) {
    return db().then(function (d) {
      return new Promise(function (resolve, reject) {
        var tx = d.transaction(STORE, "readwrite");
        tx.objectStore(STORE).put(record);
        tx.oncomplete = function () { resolve(record); };
        tx.onerror = function () { reject(tx.error); };
      });
    });
  }

  function enrol(signer) {
    // extractable=false: the private key can sign here and nowhere else; the public key is always exportable.
    return crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]).then(function (pair) {
      return crypto.subtle.exportKey("raw", pair.publicKey).then(function (raw) {
        return fetch(signer.enrolUrl, {
          method: "POST", credentials: "same-origin",
          headers: { "Content-Type": "application/json", "X-CSRFToken": signer.csrf },
          body: JSON.stringify({ publicKey: b64url(raw) })
        }).then(function (r) {
          return r.json().then(function (answer) {
            if (!r.ok) throw refusal(signer, answer);
            return keep({ principal: signer.actor.id, keyId: answer.keyId, privateKey: pair.privateKey,
                          publicKey: pair.publicKey, publicKeyB64: b64url(raw), enrolledAt: now() });
          });
        });
      });
    });
  }

  var ready = null;

  // This browser's key for the signed-in person: enrolled now if it has none the Registry knows.
  function key(signer) {
    if (!ready) {
      ready = stored(signer.actor.id).then(function (record) {
        if (record && signer.revoked.indexOf(record.keyId) >= 0) {
          record.revoked = true;
          return record;
        }
        if (record && signer.keys.indexOf(record.keyId) >= 0) return record;
        return enrol(signer);
      });
    }
    return ready;
  }

  function sign(record, doc, timeField) {
    var body = {};
    Object.keys(doc).forEach(function (k) { if (k !== "signature") body[k] = doc[k]; });
    return crypto.subtle.sign({ name: "Ed25519" }, record.privateKey, signingBytes(body)).then(function (value) {
      body.signature = { algorithm: "Ed25519", keyId: record.keyId, createdAt: body[timeField], value: b64url(value) };
      return body;
    });
  }

  // --- building a Command from a form ---------------------------------------------
  function text(form, name) {
    var input = form.elements[name];
    return input ? String(input.value).trim() : "";
  }

  function number(raw, field) {
    var n = Number(raw);
    if (raw === "" || !isFinite(n)) throw new Error(field + ": " + JSON.stringify(raw) + " is not a number");
    return n;
  }

  var BUILDERS = {
    // mission.create (§7.1): a new Mission and its Group, with the terms the form gives.
    mission: function (form, spec, payload) {
      payload.groupId = spec.groupId = newUrn();
      payload.missionId = newUrn();
      payload.definitionOfDone = [{ criterionId: "done", description: text(form, "done"),
                                    evidenceRequired: ["human_review"] }];
      var days = number(text(form, "days") || "7", "days");
      payload.deadline = new Date(Date.now() + days * 86400000).toISOString();
      payload.budget = { currency: "EUR", financialLimit: number(text(form, "budget") || "100", "budget") };
      spec.then = spec.then.replace("GROUP", payload.groupId.slice(URN.length));
    },
    // policy.grant_cooperation_override (§20): the member it is for, and when it lapses.
    override: function (form, spec, payload) {
      payload.beneficiary = JSON.parse(text(form, "beneficiary"));
      var minutes = number(text(form, "minutes") || "60", "minutes");
      payload.expiresAt = new Date(Date.now() + minutes * 60000).toISOString();
    },
    // ext.mwportal.scheduling.priority_policy_set: the policy document the editor describes.
    policy: function (form, spec, payload) {
      var classes = {}, groups = {};
      var count = Number(text(form, "class_count") || "0");
      for (var i = 0; i <= count; i++) {
        var name = text(form, "class_name_" + i), weight = text(form, "class_weight_" + i);
        if (!name && !weight) continue;
        classes[name] = number(weight, "class_weight_" + i);
      }
      form.querySelectorAll(".group-row").forEach(function (row) {
        var gid = row.dataset.group, entry = {};
        var klass = text(form, "group_class_" + gid), quota = text(form, "group_quota_" + gid);
        if (klass) entry["class"] = klass;
        if (quota) entry.quota = Math.trunc(number(quota, "group_quota_" + gid));
        if (Object.keys(entry).length) groups[gid] = entry;
      });
      payload.policy = { classes: classes, default_class: text(form, "default_class"), groups: groups,
                         aging_seconds: number(text(form, "aging_seconds"), "aging_seconds") };
    }
  };

  function command(form, spec) {
    var payload = JSON.parse(JSON.stringify(spec.payload));
    Object.keys(spec.fields).forEach(function (name) {
      var value = text(form, name);
      if (value === "") return;
      payload[spec.fields[name]] = spec.numbers.indexOf(name) >= 0 ? number(value, name) : value;
    });
    spec.fresh.forEach(function (member) { payload[member] = newUrn(); });
    if (spec.builder) BUILDERS[spec.builder](form, spec, payload);
    var action = newUrn();
    var doc = { protocolVersion: "0.1", actionId: action, actor: spec.actor, kind: spec.kind,
                correlationId: action, issuedAt: now(), payload: payload, groupId: spec.groupId };
    ["membershipEpoch", "expectedRevision", "workItemId"].forEach(function (name) {
      if (spec[name] !== undefined && spec[name] !== null) doc[name] = spec[name];
    });
    return doc;
  }

  // mission.approve (§7.3): the MissionOwner signs the Approval document over exactly the
  // submitted revision and Artifact set, and carries it in the Command's payload.
  function withApproval(record, doc, spec) {
    if (!spec.approval) return Promise.resolve(doc);
    var p = doc.payload, approval = JSON.parse(JSON.stringify(spec.approval));
    approval.approvalId = p.approvalId;
    approval.comments = p.comments || "";
    approval.occurredAt = doc.issuedAt;
    return sign(record, approval, "occurredAt").then(function (signed) {
      p.approval = signed;
      return doc;
    });
  }

  // --- refusals and the outcome ------------------------------------------------------
  function refusal(signer, error) {
    var reason = error.details && error.details.reason;
    var words = (reason && signer.reasons[reason]) || signer.words[error.code] || "the request was refused";
    var e = new Error(error.code + ": " + words + " (" + error.message + ")");
    e.document = error;
    return e;
  }

  function say(form, message, ok) {
    var box = form.querySelector(".signed-outcome");
    if (!box) {
      box = document.createElement("div");
      box.className = "signed-outcome";
      form.insertBefore(box, form.firstChild);
    }
    box.className = "signed-outcome msg " + (ok ? "msg-success" : "msg-error refusal");
    box.setAttribute("role", ok ? "status" : "alert");
    box.textContent = message;
  }

  function accepted(receipt) {
    var events = (receipt.events || []).map(function (e) { return e.kind + " (#" + e.sequence + ")"; }).join(", ");
    return "Accepted" + (receipt.replayed ? " (already recorded earlier)" : "") + ": " + events +
      "; action " + String(receipt.actionId).slice(URN.length, URN.length + 8);
  }

  function submit(signer, form, event) {
    event.preventDefault();
    var spec = JSON.parse(document.getElementById(form.dataset.command).textContent);
    var button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    var record;
    key(signer).then(function (r) {
      record = r;
      if (record.revoked) throw new Error("AUTH_INVALID_SIGNATURE: the key of this browser was revoked; enrol it again on the Keys page");
      return withApproval(record, command(form, spec), spec);
    }).then(function (doc) {
      return sign(record, doc, "issuedAt");
    }).then(function (doc) {
      return fetch(signer.commandsUrl, { method: "POST", headers: { "Content-Type": "application/json" },
                                         body: JSON.stringify(doc) });
    }).then(function (r) {
      return r.json().then(function (answer) {
        if (!r.ok) throw refusal(signer, answer);
        sessionStorage.setItem("mwp-flash", accepted(answer));
        if (spec.then) location.assign(spec.then); else location.reload();
      });
    }).catch(function (e) {
      say(form, e.message || String(e), false);
      if (button) button.disabled = false;
    });
  }

  function flash() {
    var message = sessionStorage.getItem("mwp-flash");
    if (!message) return;
    sessionStorage.removeItem("mwp-flash");
    var main = document.querySelector("main");
    var box = document.createElement("div");
    box.className = "messages";
    var msg = document.createElement("div");
    msg.className = "msg msg-success";
    msg.setAttribute("role", "status");
    msg.textContent = message;
    box.appendChild(msg);
    main.insertBefore(box, main.firstChild);
  }

  function start() {
    var cfg = document.getElementById("mwp-signer");
    if (!cfg) return;
    var signer = JSON.parse(cfg.textContent);
    flash();
    var status = document.getElementById("key-status");
    window.mwpKey = function () { return key(signer); };  // for the Keys page and the browser tests
    key(signer).then(function (record) {
      document.body.dataset.keyId = record.keyId;
      document.body.dataset.keyState = record.revoked ? "revoked" : "ready";
      var mine = document.getElementById("this-key");
      if (mine) mine.textContent = record.keyId + (record.revoked ? " (revoked)" : "");
      if (status) status.textContent = record.revoked ? "this browser's key was revoked" : "signing key ready";
    }).catch(function (e) {
      document.body.dataset.keyState = "failed";
      if (status) status.textContent = "no signing key: " + (e.message || e);
    });
    document.querySelectorAll("form[data-command]").forEach(function (form) {
      form.addEventListener("submit", function (event) { submit(signer, form, event); });
    });
    var again = document.getElementById("enrol-again");
    if (again) again.addEventListener("click", function () {
      ready = enrol(signer).then(function () { location.reload(); });
    });
  }

  window.mwpJcs = jcs;  // the canonical form the page signs, for the browser tests to compare with the server's
  document.addEventListener("DOMContentLoaded", start);
})();
