// The run page and the run list. Plain DOM, no framework: every value from the journal is put
// in the page with textContent, never as markup, so a row holding "<script>" shows as text.
"use strict";

(function () {
  const FOLD_AT = 240; // longer values are folded behind a <details>
  const RETRY_MIN_MS = 250;
  const RETRY_MAX_MS = 2000;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function show(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  // A value shown whole when short, folded when long.
  function folded(label, value) {
    const text = show(value);
    if (text.length <= FOLD_AT) {
      const line = el("div", "value");
      line.append(el("span", "label", label + ": "), el("code", "", text));
      return line;
    }
    const box = el("details", "value");
    box.append(el("summary", "", label + ": " + text.slice(0, FOLD_AT / 2) + "…"), el("pre", "", text));
    return box;
  }

  function seconds(value) {
    if (typeof value !== "number" || !isFinite(value)) return "";
    return value < 1 ? (value * 1000).toFixed(0) + " ms" : value.toFixed(2) + " s";
  }

  // An attempt's cost ({amount}) or a roll-up ({total, wasted}); nothing when unpriced, never a zero.
  function cost(value) {
    if (!value || typeof value !== "object") return "";
    const amount = typeof value.amount === "number" ? value.amount : value.total;
    if (typeof amount !== "number") return "";
    const wasted = typeof value.wasted === "number" && value.wasted > 0 ? ", " + value.wasted.toFixed(4) + " wasted" : "";
    const lower = value.unpriced ? "≥ " : "";
    return lower + amount.toFixed(4) + " " + (value.currency || "") + wasted;
  }

  // --- the token, traded once for an HttpOnly cookie: no script keeps it ---------------------------

  function askForToken(then) {
    const form = document.getElementById("login");
    const error = document.getElementById("login-error");
    const status = document.getElementById("status");
    if (status) status.textContent = "";
    form.hidden = false;
    form.onsubmit = async (event) => {
      event.preventDefault();
      const token = document.getElementById("token").value;
      const answer = await fetch("/ui/login", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: token }),
        credentials: "same-origin",
      });
      if (answer.ok) {
        form.hidden = true;
        error.hidden = true;
        then();
      } else {
        error.textContent = answer.status === 401 ? "That token was refused." : "Login failed: HTTP " + answer.status;
        error.hidden = false;
      }
    };
  }

  // --- the run list ----------------------------------------------------------------------------

  async function listRuns() {
    const status = document.getElementById("status");
    const answer = await fetch("/api/runs", { credentials: "same-origin" });
    if (answer.status === 401) return askForToken(listRuns);
    if (!answer.ok) {
      status.textContent = "Cannot list runs: HTTP " + answer.status;
      return;
    }
    const runs = (await answer.json()).runs;
    const table = document.getElementById("runs");
    const body = table.querySelector("tbody");
    body.replaceChildren();
    for (const run of runs) {
      const row = el("tr");
      const link = el("a", "", run.run_id);
      link.href = "/ui/sessions/" + encodeURIComponent(run.session_id) + "/runs/" + encodeURIComponent(run.run_id);
      const runCell = el("td");
      runCell.append(link);
      const state = el("td", "state " + (run.terminal_state || ""), run.terminal_state || "");
      const started = run.started_at ? new Date(run.started_at * 1000).toLocaleString() : "";
      row.append(el("td", "", run.session_id), runCell, state, el("td", "", started),
        el("td", "num", seconds(run.duration_s)), el("td", "num", cost(run.cost)));
      body.append(row);
    }
    status.textContent = runs.length ? "" : "No runs yet.";
    table.hidden = !runs.length;
  }

  // --- one run, followed live ------------------------------------------------------------------

  function followRun() {
    const parts = location.pathname.split("/").map(decodeURIComponent);
    // /ui/sessions/<session_id>/runs/<run_id>
    const sessionId = parts[3];
    const runId = parts[5];
    document.getElementById("title").textContent = runId + " (" + sessionId + ")";
    document.title = runId + " · relay-runtime";

    const stateBox = document.getElementById("state");
    const connection = document.getElementById("connection");
    const answerBox = document.getElementById("assistant-text");
    const reasoningBox = document.getElementById("reasoning-box");
    const reasoningText = document.getElementById("reasoning-text");
    const model = document.getElementById("model");
    const tools = document.getElementById("tools");
    const notices = document.getElementById("notices");
    const tree = document.getElementById("tree");

    let lastSeq = 0; // rows at or below it are shown already: a replay after a reconnect adds nothing twice
    let finished = false;
    let source = null; // the AbortController of the stream being read
    let retry = RETRY_MIN_MS;
    let message = null; // the assistant message being streamed
    // The text the attempt in flight added: a stream's rows come before its attempt's span row, and a
    // fallback's first words before its warning (the summary's last assistant text reads them so too).
    let sinceAttempt = [];
    let attemptsSeen = false; // a journal another producer wrote has no attempt rows: its warnings come first
    const openTools = [];
    const treeNodes = new Map();

    function setState(state) {
      stateBox.textContent = state;
      stateBox.className = "state " + state;
    }

    function newMessage() {
      message = null;
      sinceAttempt = [];
    }

    function appendText(text) {
      if (!message) {
        message = el("div", "message");
        answerBox.append(message);
      }
      const node = document.createTextNode(text);
      message.append(node);
      return node;
    }

    function notice(kind, text) {
      notices.append(el("li", kind, text));
    }

    // The run's tree, built as span rows arrive, in time linear in their number: a child that comes
    // before its parent waits at the top (shown) until the parent arrives, then moves under it. A span
    // that is its own parent, or whose parent is below it (a cycle), stays at the top, marked.
    // treeNodes: span id -> {node, parent, line, note}; waitingFor: parent id -> entries waiting for it.
    const waitingFor = new Map();

    function place(entry) {
      const { node, parent: parentId } = entry;
      if (!parentId) return tree.append(node), "";
      if (parentId === node.dataset.id) return tree.append(node), " · ⟲ its own parent: shown at the top";
      const parent = treeNodes.get(parentId);
      if (!parent) {
        let waiting = waitingFor.get(parentId);
        if (!waiting) waitingFor.set(parentId, (waiting = new Set()));
        waiting.add(entry);
        tree.append(node);
        return "";
      }
      if (node.contains(parent.node)) {
        return tree.append(node), " · ⟲ in a cycle (its parent " + parentId + " is below it): shown at the top";
      }
      parent.node.lastChild.append(node);
      return "";
    }

    function describe(entry, note) {
      if (note !== entry.note) entry.node.classList.toggle("cycle", Boolean(note));
      entry.note = note;
      entry.node.firstChild.textContent = entry.line + note;
    }

    function treeNode(span) {
      let entry = treeNodes.get(span.id);
      const fresh = !entry;
      if (fresh) {
        const node = el("li");
        node.dataset.id = span.id;
        node.append(el("span", "line"), el("ul"));
        entry = { node: node, parent: null, line: "", note: "" };
        treeNodes.set(span.id, entry);
      }
      const tokens = [span.input_tokens, span.output_tokens].every((n) => typeof n === "number")
        ? " · " + span.input_tokens + " in / " + span.output_tokens + " out tokens" : "";
      const what = [span.provider, span.model].filter(Boolean).join(" / ");
      entry.line = span.kind + " " + (span.name || "") + (what ? " [" + what + "]" : "") + " · " +
        (span.outcome || "") + " · " + seconds(span.duration_s) + tokens +
        (span.error_type ? " · " + span.error_type : "") + (span.cost ? " · " + cost(span.cost) : "");
      entry.node.firstChild.className = "line outcome-" + (span.outcome || "");
      const parentId = typeof span.parent_id === "string" ? span.parent_id : "";
      let note = entry.note;
      if (fresh || entry.parent !== parentId) {
        const before = waitingFor.get(entry.parent);
        if (before) before.delete(entry);
        entry.parent = parentId;
        note = place(entry);
      }
      describe(entry, note);
      // Parents end after their children, so children often arrive first: adopt those waiting for it.
      const waiting = fresh ? waitingFor.get(span.id) : undefined;
      if (waiting) {
        waitingFor.delete(span.id);
        for (const child of waiting) describe(child, place(child));
      }
    }

    function apply(row) {
      const payload = row.payload && typeof row.payload === "object" && !Array.isArray(row.payload) ? row.payload : {};
      if (payload.truncated === true && typeof payload.original_bytes === "number") {
        // The writer kept only the start of a row over its cap: say so where the row would show,
        // rather than show less than was written without a word.
        const what = "row " + row.seq + " (" + String(row.event) + ") was " + payload.original_bytes +
          " bytes, over the journal's row cap: only its start was kept";
        notice("warning", what);
        if (row.event === "token") {
          appendText("");
          message.append(el("span", "truncated", "[… text of row " + row.seq + " not kept: " +
            payload.original_bytes + " bytes]"));
        } else if (row.event === "tool" || row.event === "tool_call" || row.event === "tool_result") {
          const item = el("li");
          item.append(el("strong", "", String(payload.name || row.event) + " (truncated)"),
            folded("start", payload.preview ?? ""));
          tools.append(item);
        }
        if (row.event === "tool" || row.event === "tool_call") newMessage();
        if (!row.terminal) return;
      } else if (row.payload !== undefined && row.payload !== null && payload !== row.payload) {
        notice("warning", "row " + row.seq + " (" + String(row.event) + ") has a payload that is not an object: " +
          show(row.payload).slice(0, FOLD_AT));
      }
      switch (row.event) {
        case "status":
          if (payload.type === "run_started") setState("running");
          break;
        case "token":
          if (typeof payload.text === "string") {
            const node = appendText(payload.text);
            if (payload.text) sinceAttempt.push(node);
          }
          break;
        case "reasoning":
          if (typeof payload.text === "string") {
            reasoningBox.hidden = false;
            reasoningText.append(document.createTextNode(payload.text));
          }
          break;
        case "runtime_model":
          model.textContent = typeof payload.model === "string"
            ? "answered by " + [payload.provider, payload.model].filter(Boolean).join(" / ") +
              (payload.fallback_active ? " (fallback)" : "")
            : "";
          break;
        case "warning":
          notice("warning", payload.type === "fallback"
            ? "fallback: " + [payload.from_provider, payload.from_model].filter(Boolean).join(" / ") + " → " +
              [payload.to_provider, payload.to_model].filter(Boolean).join(" / ")
            : "warning: " + show(payload.message || payload));
          if (payload.type === "fallback") {
            const moved = attemptsSeen ? sinceAttempt : [];
            const from = message;
            newMessage();
            if (moved.length) {
              appendText("");
              message.append(...moved); // out of the message they were streamed into
              if (from && !from.textContent) from.remove();
              sinceAttempt = moved;
            }
          }
          break;
        case "tool": {
          const item = el("li");
          item.append(el("strong", "", String(payload.name || "tool")), folded("arguments", payload.args ?? null));
          tools.append(item);
          openTools.push(item);
          newMessage();
          break;
        }
        case "tool_result": {
          const item = openTools.shift() || tools.appendChild(el("li"));
          const outcome = payload.outcome ? " (" + payload.outcome + ", " + seconds((payload.duration_ms || 0) / 1000) + ")" : "";
          item.append(folded((payload.error ? "error" : "result") + outcome, payload.error ?? payload.result ?? ""));
          break;
        }
        case "tool_call": {
          const item = el("li");
          item.append(el("strong", "", "the model asked for tools"), folded("calls", payload.calls ?? payload));
          tools.append(item);
          newMessage();
          break;
        }
        case "span":
          if (typeof payload.id === "string" && payload.id) treeNode(payload);
          if (payload.kind === "attempt" && !String(payload.call_role || "").startsWith("auxiliary")) {
            // A stream that broke after some text: its retry says the answer again, not more of it.
            if (sinceAttempt.length && (payload.outcome === "failed" || payload.outcome === "cancelled")) newMessage();
            sinceAttempt = [];
            attemptsSeen = true;
          }
          break;
        case "apperror":
        case "error":
          notice("error", (payload.error_type || payload.type || "error") + ": " + show(payload.message || ""));
          break;
      }
      if (row.terminal) {
        finished = true;
        setState(row.terminal_state || "ended");
        if (source) source.abort();
        connection.hidden = true;
      }
    }

    function onRow(data) {
      let row;
      try {
        row = JSON.parse(data);
      } catch (_) {
        return;
      }
      if (typeof row.seq !== "number" || row.seq <= lastSeq) return;
      lastSeq = row.seq;
      if (!finished && stateBox.textContent !== "running") setState("running"); // rows flow: it has started
      apply(row);
    }

    // One server-sent message ("id: ...\nevent: ...\ndata: {...}"): only its data matters, the row says the rest.
    function onMessage(text) {
      let data = "";
      for (const line of text.split("\n")) {
        if (line.startsWith("data: ")) data += line.slice(6);
        else if (line.startsWith("data:")) data += line.slice(5);
      }
      if (data) onRow(data);
    }

    function reconnectLater(lost) {
      if (finished) return;
      connection.hidden = !lost;
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, RETRY_MAX_MS);
    }

    // The rows as server-sent events, read with fetch rather than EventSource: a replay of thousands of
    // rows arrives in a few large pieces, each handled in one go, instead of one browser task per row.
    async function connect() {
      if (finished) return;
      const url = "/runs/" + encodeURIComponent(runId) + "/events?session_id=" + encodeURIComponent(sessionId) +
        (lastSeq ? "&after_seq=" + lastSeq : "");
      source = new AbortController();
      let answer;
      try {
        answer = await fetch(url, { credentials: "same-origin", cache: "no-store", signal: source.signal,
          headers: { Accept: "text/event-stream" } });
      } catch (_) {
        return reconnectLater(true);
      }
      if (answer.status === 401) {
        connection.hidden = true;
        return askForToken(connect);
      }
      if (answer.status === 404 && !lastSeq) {
        // Not written yet (the page was opened first): wait for its first row, quietly.
        setState("waiting");
        stateBox.textContent = "waiting for the run to start";
        return reconnectLater(false);
      }
      if (!answer.ok || !answer.body) return reconnectLater(true);
      connection.hidden = true;
      retry = RETRY_MIN_MS;
      const reader = answer.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let start = 0;
          let end;
          while (!finished && (end = buffer.indexOf("\n\n", start)) >= 0) {
            onMessage(buffer.slice(start, end));
            start = end + 2;
          }
          buffer = buffer.slice(start);
          if (finished) return;
        }
      } catch (_) {
        // the connection dropped mid-stream: reconnect after the last row shown
      }
      reconnectLater(true);
    }

    connect();
  }

  if (document.body.dataset.page === "run") followRun();
  else listRuns();
})();
