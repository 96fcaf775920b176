// culedger html: draws the page from the JSON in #culedger-data (report, explain and diff
// documents, plus chart data; see cli/src/html.rs). Every string that comes from a report is
// written with textContent, never as markup.
(function () {
  "use strict";
  var CATS = ["weights", "kv_pool", "ipc", "graphs", "comm", "other"];
  // A time from a report as ISO 8601; one a Date cannot hold (start time i64::MAX) as its number.
  function isoTime(us) { var d = new Date(us / 1000); return isNaN(d.getTime()) ? us + " µs since the Unix epoch" : d.toISOString(); }

  var COLORS = { weights: "#4e79a7", kv_pool: "#f28e2c", ipc: "#e15759", graphs: "#76b7b2", comm: "#59a14f", other: "#edc949",
    untracked: "#bab0ac", driver_costs: "#8e44ad", untracked_other: "#bab0ac", free: "#ffffff" };
  // The six, then the categories of a run's own (a user's rules, a program's tags), by name:
  // none is dropped or folded into another, each has a colour of its own.
  var OWN = ["#ff9da7", "#9c755f", "#b07aa1", "#d37295", "#a0cbe8", "#ffbe7d", "#8cd17d", "#86bcb6"];
  // A GPU's number as nvidia-smi gives it ("3"), a MIG device's with its place under its GPU
  // ("0 MIG 1"); and the key of a GPU in data attributes ("host:3", "host:0/1" for a MIG device).
  function gpuNo(index, mig) { return mig == null ? String(index) : index + " MIG " + mig; }
  // A GPU in words: "GPU 3", "GPU 0 MIG 1", or its UUID's name ("GPU-8f2e1a0b") where its
  // host's numbering is not known (`gpu_name` of a finding, `uuid_name` of a chart).
  function gpuWords(index, mig, name) { return name ? name : "GPU " + gpuNo(index, mig); }
  function gpuKey(host, index, mig) { return host + ":" + index + (mig == null ? "" : "/" + mig); }
  function catsOf(map) { return CATS.concat(Object.keys(map || {}).filter(function (k) { return CATS.indexOf(k) < 0; }).sort()); }
  function catColor(c) {
    if (COLORS[c]) return COLORS[c];
    var h = 0;
    for (var i = 0; i < c.length; i++) h = (h * 31 + c.charCodeAt(i)) % 65521;
    return OWN[h % OWN.length];
  }
  var data = JSON.parse(document.getElementById("culedger-data").textContent);
  var app = document.getElementById("app");
  var painted = 0;

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) { if (attrs[k] == null) continue; if (k === "text") e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]); }
    (children || []).forEach(function (c) { if (c != null) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function fmtBytes(b) {
    if (b == null) return "-";
    var sign = b < 0 ? "-" : "", a = Math.abs(b), u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    if (a < 1024) return sign + a + " B";
    while (a >= 1024 && i < u.length - 1) { a /= 1024; i++; }
    return sign + a.toFixed(2) + " " + u[i];
  }
  function fmtDelta(b) { return (b > 0 ? "+" : "") + fmtBytes(b); }
  function fmtSecs(us) { return (us / 1e6).toFixed(3) + "s"; }
  function table(head, rows, numeric) {
    var t = el("table");
    t.appendChild(el("tr", null, head.map(function (h, i) { return el("th", { text: h, "class": numeric && numeric[i] ? "num" : "" }); })));
    rows.forEach(function (r) {
      t.appendChild(el("tr", null, r.map(function (c, i) { return el("td", { text: c == null ? "-" : String(c), "class": numeric && numeric[i] ? "num" : "" }); })));
    });
    return el("div", { "class": "scroll" }, [t]);
  }

  // Findings with the same mechanism on several GPUs (`folded_into` the first) are one
  // card: its title names them all, its text is the first's, and a table gives each GPU
  // what differs (the process, the request, what was free), as explain's text does.
  function foldedRows(head, all) {
    var hosts = {}; all.forEach(function (f) { hosts[f.host] = 1; });
    var gpu = function (f) { return (Object.keys(hosts).length > 1 ? f.host + " " : "") + gpuWords(f.device, f.mig_index, f.gpu_name); };
    all.sort(function (a, b) { return a.host < b.host ? -1 : a.host > b.host ? 1 : a.device - b.device || (a.mig_index || 0) - (b.mig_index || 0); });
    if (head.kind === "failed_allocation") {
      var sizes = all.some(function (f) { return f.detail.bytes !== head.detail.bytes; });
      var hd = ["GPU", "process"].concat(sizes ? ["asked"] : [], ["told free", "at", "hidden costs", "other processes", "free", "short by"]);
      return table(hd, all.map(function (f) {
        var d = f.detail, r = d.reconciliation, q = r ? r.query : null;
        var sum = function (kind) { return r ? fmtBytes(r.items.reduce(function (s, i) { return s + (i.kind === kind ? i.bytes : 0); }, 0)) : null; };
        return [gpu(f), d.process].concat(sizes ? [fmtBytes(d.bytes)] : [], [q ? fmtBytes(q.free_bytes) : null, q ? fmtSecs(q.at_us) : null,
          sum("driver_cost"), sum("other_processes"),
          d.free_bytes == null ? null : fmtBytes(d.free_bytes), d.short_by_bytes == null ? null : fmtBytes(d.short_by_bytes)]);
      }), [0, 0].concat(sizes ? [1] : [], [1, 1, 1, 1, 1, 1]));
    }
    return table(["GPU", "from", "to", "rise", "free after"], all.map(function (f) {
      var d = f.detail;
      return [gpu(f), fmtSecs(d.from.at_us), fmtSecs(d.to.at_us), fmtBytes(d.rise_bytes), fmtBytes(d.free_after_bytes)];
    }), [0, 1, 1, 1, 1]);
  }

  function findings(ex) {
    var box = el("section", { id: "findings" });
    box.appendChild(el("h2", { text: "Findings: " + ex.verdict }));
    var more = null, cards = 0, heads = [];
    ex.findings.forEach(function (f, k) { if (f.folded_into == null) heads.push(k); });
    heads.forEach(function (k) {
      var f = ex.findings[k];
      var all = ex.findings.filter(function (g, j) { return j === k || g.folded_into === k; });
      if (cards === 3) { more = el("details", null, [el("summary", { text: (heads.length - 3) + " more findings" })]); box.appendChild(more); }
      cards += 1;
      var head = el("div", null, [el("span", { "class": "sev " + f.severity, text: f.severity }), el("span", { "class": "title", text: f.folded_title || f.title })]);
      var div = el("div", { "class": "finding " + f.severity, "data-gpus": all.map(function (g) { return gpuKey(g.host, g.device, g.mig_index); }).join(" ") }, [head, el("div", { "class": "text", text: f.text })]);
      if (all.length > 1) {
        var many = all.some(function (g) { return g.host !== f.host; });
        div.appendChild(el("p", { "class": "meta", text: "The text above is " + (many ? f.host + " " : "") + gpuWords(f.device, f.mig_index, f.gpu_name) + "'s; on each of the " + all.length + " GPUs:" }));
        div.appendChild(foldedRows(f, all));
      }
      if (f.callers && f.callers.length) div.appendChild(el("div", { "class": "callers", text: "call sites: " + f.callers.join(", ") }));
      (more || box).appendChild(div);
    });
    (ex.notes || []).forEach(function (n) { box.appendChild(el("p", { "class": "meta", text: "Note: " + n })); });
    return box;
  }

  // One GPU's timeline: categories stacked (step functions), the capacity line, and the
  // free-memory queries (blue; the sizing query bold), driver costs (purple) and failures
  // (red) marked on the canvas and listed under it.
  function timeline(ch, box, summary) {
    var cats = catsOf(ch.cats).filter(function (c) { return (ch.cats[c] || []).some(function (v) { return v > 0; }); });
    if (!ch.t.length || !cats.length) { box.appendChild(el("p", { "class": "meta", text: "No tracked allocation on this GPU (a context or peer mapping only)." })); return; }
    var raw = {}, stacked = [], acc = ch.t.map(function () { return 0; });
    cats.forEach(function (c) { raw[c] = ch.cats[c]; acc = acc.map(function (v, i) { return v + ch.cats[c][i]; }); stacked.push(acc.slice()); });
    // Untracked memory (contexts, driver costs, other processes) on top: the stack then
    // reaches what the device used at each reading.
    if ((ch.untracked || []).some(function (v) { return v != null && v > 0; })) {
      cats.push("untracked");
      raw.untracked = ch.untracked.map(function (v) { return v == null ? 0 : v; });
      acc = acc.map(function (v, i) { return v + raw.untracked[i]; });
      stacked.push(acc.slice());
    }
    // End the steps at the end of the run (the last report).
    var tEnd = Math.max(ch.t[ch.t.length - 1], summary.end);
    var xs = ch.t.concat([tEnd]);
    function ext(a) { return a.concat([a[a.length - 1]]); }
    var GiB = 1073741824;
    var series = [{ label: "t (s)", value: function (u, v) { return v == null ? "-" : v.toFixed(3) + "s"; } }];
    var plotData = [xs];
    for (var i = cats.length - 1; i >= 0; i--) {
      (function (c, i) {
        series.push({ label: c, stroke: catColor(c), fill: catColor(c), width: 1, points: { show: false },
          paths: uPlot.paths.stepped({ align: 1 }),
          value: function (u, v, si, idx) { return idx == null ? "-" : fmtBytes(ext(raw[c])[idx]); } });
        plotData.push(ext(stacked[i]).map(function (v) { return v / GiB; }));
      })(cats[i], i);
    }
    if (ch.capacity) {
      series.push({ label: "capacity", stroke: "#7f7f7f", dash: [6, 4], width: 1.5, points: { show: false }, value: function () { return fmtBytes(ch.capacity); } });
      plotData.push(xs.map(function () { return ch.capacity / GiB; }));
    }
    var marks = [];
    ch.queries.forEach(function (q, k) { marks.push({ t: q.t, kind: q.sizing ? "s" : "q", tag: "Q" + (k + 1), q: q }); });
    // Driver costs of one process and API in the same millisecond: one mark.
    ch.costs.forEach(function (c) {
      var last = marks[marks.length - 1];
      if (last && last.c && last.c.pid === c.pid && last.c.api === c.api && Math.abs(last.t - c.t) < 0.001) { last.n++; last.bytes += c.bytes; return; }
      marks.push({ t: c.t, kind: "c", tag: "D", c: c, n: 1, bytes: c.bytes });
    });
    ch.failures.forEach(function (f, k) { marks.push({ t: f.t, kind: "f", tag: "F" + (k + 1), f: f }); });
    var color = { q: "#3366cc", s: "#1a4d99", c: "#8e44ad", f: "#d62728" };
    // The interesting window: from the first allocation to the end (or the last failure).
    var first = xs[0], last = tEnd;
    for (var j = 0; j < xs.length; j++) { if (stacked[stacked.length - 1][Math.min(j, stacked[0].length - 1)] > 0) { first = xs[j]; break; } }
    var span = Math.max(last - first, 0.001);
    var chartDiv = el("div", { "class": "chart" });
    box.appendChild(chartDiv);
    var width = Math.max(240, Math.min(1200, (app.clientWidth || 1100) - 48));
    var opts = {
      width: width, height: 300, series: series,
      scales: { x: { time: false, min: first - span * 0.03, max: last + span * 0.03 }, y: { range: function (u, lo, hi) { return [0, Math.max(hi, (ch.capacity || 0) / GiB) * 1.05]; } } },
      axes: [{ label: "seconds since the run's first process started" }, { label: "GiB", size: 60 }],
      cursor: { drag: { x: true, y: false } },
      hooks: { draw: [function (u) {
        var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
        ctx.save();
        marks.forEach(function (m) {
          if (m.t < u.scales.x.min || m.t > u.scales.x.max) return;
          var x = Math.round(u.valToPos(m.t, "x", true));
          ctx.strokeStyle = color[m.kind]; ctx.lineWidth = m.kind === "s" || m.kind === "f" ? 2.5 : 1;
          ctx.setLineDash(m.kind === "c" ? [2, 3] : []);
          ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
          if (m.kind !== "c") { ctx.fillStyle = color[m.kind]; ctx.font = "bold " + Math.round(11 * devicePixelRatio) + "px sans-serif"; ctx.fillText(m.tag, x + 3, top + 12 * devicePixelRatio); }
          if (m.q && m.q.used != null) { // what the device used at the query
            var y = Math.round(u.valToPos(m.q.used / GiB, "y", true));
            ctx.fillStyle = "#333"; ctx.fillRect(x - 3, y - 3, 6, 6);
          }
        });
        ctx.restore();
        // Count painted pixels once: the page says in the DOM that its charts were drawn.
        if (!u._counted) {
          u._counted = true;
          try {
            var img = ctx.getImageData(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height).data, n = 0;
            for (var p = 3; p < img.length; p += 16) if (img[p] > 0) n++;
            chartDiv.setAttribute("data-painted", String(n));
            if (n > 0) painted++;
            document.body.setAttribute("data-charts-painted", String(painted));
          } catch (e) { chartDiv.setAttribute("data-painted", "unknown"); }
        }
      }] }
    };
    new uPlot(opts, plotData, chartDiv);
    box.appendChild(el("div", { "class": "legend-note", text: "Stacked live bytes per category, untracked (grey: used minus tracked, at each reading) on top; dashed: capacity; squares: device used at a query. Drag to zoom, double-click to reset." }));
    var list = el("ul", { "class": "marks" });
    marks.sort(function (a, b) { return a.t - b.t; }).forEach(function (m) {
      var text;
      if (m.q) {
        var q = m.q;
        text = m.tag + " " + m.t.toFixed(3) + "s pid " + q.pid + " " + q.api + ": told free " + fmtBytes(q.free) + (q.total != null ? " of " + fmtBytes(q.total) : "") +
          (q.used != null ? "; device used " + fmtBytes(q.used) + ", tracked " + fmtBytes(q.tracked) + ", untracked " + fmtBytes(q.untracked) : "") +
          (q.sizing ? "  <- the sizing query (" + ch.sizing.why + ")" : "");
      } else if (m.c) {
        text = "D " + m.t.toFixed(3) + "s pid " + m.c.pid + " " + m.c.api + (m.n > 1 ? " ×" + m.n : "") + ": hidden driver cost " + fmtBytes(m.bytes) + " (measured)";
      } else {
        text = m.tag + " " + m.t.toFixed(3) + "s pid " + m.f.pid + " " + m.f.api + " of " + fmtBytes(m.f.bytes) + " failed: " + m.f.error + " (it held " + fmtBytes(m.f.live) + ")";
      }
      list.appendChild(el("li", { "class": m.kind, text: text }));
    });
    box.appendChild(list);
  }

  // An icicle of live bytes by call frames (outermost on top), as nested flex rows.
  function icicle(tree) {
    var box = el("div", { "class": "icicle" });
    if (!tree.children.length) { box.appendChild(el("p", { "class": "meta", text: "No call sites recorded on this GPU." })); return box; }
    var levels = [];
    function walk(n, depth, offset) {
      (levels[depth] = levels[depth] || []).push({ n: n, off: offset });
      var o = offset;
      n.children.forEach(function (c) { walk(c, depth + 1, o); o += c.bytes; });
    }
    walk(tree, 0, 0);
    var total = tree.bytes || 1;
    levels.slice(0, 24).forEach(function (cells) {
      var row = el("div", { "class": "row" }), at = 0;
      cells.forEach(function (c) {
        if (c.off > at) row.appendChild(el("div", { "class": "cell gap", style: "width:" + ((c.off - at) / total * 100) + "%" }));
        var w = c.n.bytes / total * 100;
        var cell = el("div", { "class": "cell " + c.n.kind, style: "width:" + w + "%", text: w > 4 ? c.n.name : "" });
        cell.title = c.n.name + ": " + fmtBytes(c.n.bytes);
        row.appendChild(cell);
        at = c.off + c.n.bytes;
      });
      box.appendChild(row);
    });
    box.appendChild(el("div", { "class": "legend-note", text: "Live bytes by call frames, outermost on top (blue: Python, orange: native). Hover for sizes." }));
    return box;
  }

  // explain's first failure (or warning) and What to change: the answer, as the one screen
  // `culedger run` ends with gives it.
  function answer(ex) {
    var box = el("section", { "class": "answer", id: "answer" });
    var f = null;
    (ex.findings || []).forEach(function (x) { if (!f && x.severity !== "info") f = x; });
    if (f) {
      box.appendChild(el("div", { "class": "headline " + f.severity, text: f.title }));
      box.appendChild(el("p", { "class": "text", text: f.text }));
    }
    var w = ex.what_to_change;
    if (w && w.lines && w.lines.length) {
      var change = el("div", { "class": "change", id: "what-to-change" }, [el("h2", { text: "What to change" })]);
      var list = el("ul");
      w.lines.forEach(function (l, i) { list.appendChild(el("li", { "class": i === 0 ? "first" : "", text: l + (/[.!?]$/.test(l) ? "" : ".") })); });
      change.appendChild(list);
      box.appendChild(change);
    }
    return box;
  }

  // GPU names for a set of alike GPUs: "GPU 1-7", "GPU 1, 3".
  function gpuNames(chs, hosts) {
    if (chs.some(function (c) { return c.uuid_name; })) {
      return (hosts > 1 ? chs[0].host + " " : "") + chs.map(function (c) { return gpuWords(c.index, c.mig_index, c.uuid_name); }).join(", ");
    }
    if (chs.some(function (c) { return c.mig_index != null; })) {
      return (hosts > 1 ? chs[0].host + " " : "") + "GPU " + chs.map(function (c) { return gpuNo(c.index, c.mig_index); }).join(", ");
    }
    var idx = chs.map(function (c) { return c.index; });
    var run = idx.every(function (v, i) { return i === 0 || v === idx[i - 1] + 1; });
    var list = idx.length > 2 && run ? idx[0] + "-" + idx[idx.length - 1] : idx.join(", ");
    return (hosts > 1 ? chs[0].host + " " : "") + "GPU " + list;
  }

  // Per GPU at the failure (or the peak): capacity = categories + driver costs + other
  // untracked + free, as one bar; GPUs whose figures agree to the MiB share one bar.
  function moments(run) {
    var box = el("section", { "class": "moments", id: "at-failure" });
    var chs = run.charts.filter(function (c) { return c.at; });
    if (!chs.length) return null;
    var failed = chs.some(function (c) { return c.at.kind === "failure"; });
    box.appendChild(el("h2", { text: failed ? "Each GPU at its failure" : "Each GPU at its peak" }));
    var hosts = {}; chs.forEach(function (c) { hosts[c.host] = 1; });
    var MiB = 1048576, groups = [], byKey = {};
    chs.forEach(function (c) {
      var a = c.at, m = function (v) { return Math.round((v || 0) / MiB); };
      var key = [c.host, a.kind, m(a.capacity), m(a.driver_costs), m(a.untracked_other), m(a.free), m(a.asked)].concat(catsOf(a.cats).map(function (k) { return k + ":" + m(a.cats[k]); })).join("/");
      if (byKey[key] == null) { byKey[key] = groups.length; groups.push([]); }
      groups[byKey[key]].push(c);
    });
    groups.forEach(function (g) {
      var a = g[0].at, cap = a.capacity || 1;
      var parts = [];
      catsOf(a.cats).forEach(function (k) { if (a.cats[k] > 0) parts.push([k, k, a.cats[k]]); });
      if (a.driver_costs > 0) parts.push(["driver_costs", "driver costs", a.driver_costs]);
      if (a.untracked_other > 0) parts.push(["untracked_other", "other untracked (contexts, other processes)", a.untracked_other]);
      parts.push(["free", "free", a.free]);
      var row = el("div", { "class": "moment", "data-gpus": g.map(function (c) { return gpuKey(c.host, c.index, c.mig_index); }).join(" "), "data-used": String(a.used), "data-capacity": String(a.capacity) });
      row.appendChild(el("h3", { text: gpuNames(g, Object.keys(hosts).length) + " at " + a.t.toFixed(3) + "s: " + fmtBytes(a.used) + " used of " + fmtBytes(a.capacity) + (a.asked != null ? ", asked " + fmtBytes(a.asked) + " with " + fmtBytes(a.free) + " free" : "") }));
      row.appendChild(el("div", { "class": "meta", text: a.what }));
      var bar = el("div", { "class": "bar" });
      parts.forEach(function (p) {
        var seg = el("div", { "class": "seg " + p[0], style: "width:" + (p[2] / cap * 100).toFixed(3) + "%;background:" + catColor(p[0]) });
        seg.title = p[1] + ": " + fmtBytes(p[2]);
        bar.appendChild(seg);
      });
      if (a.asked != null) {
        // The failed request, from where the device's used memory ended.
        var left = Math.min(a.used / cap * 100, 100), w = Math.min(a.asked / cap * 100, 100 - left);
        var ask = el("div", { "class": "asked", style: "left:" + left.toFixed(3) + "%;width:" + w.toFixed(3) + "%" });
        ask.title = "the failed request: " + fmtBytes(a.asked);
        bar.appendChild(ask);
      }
      row.appendChild(bar);
      var legend = el("ul", { "class": "parts" });
      parts.forEach(function (p) {
        legend.appendChild(el("li", null, [el("span", { "class": "swatch", style: "background:" + catColor(p[0]) }), p[1] + " " + fmtBytes(p[2])]));
      });
      if (a.asked != null) legend.appendChild(el("li", { "class": "asked-note" }, [el("span", { "class": "swatch asked-swatch" }), "asked " + fmtBytes(a.asked) + (a.asked > a.free ? ", short by " + fmtBytes(a.asked - a.free) : "")]));
      row.appendChild(legend);
      box.appendChild(row);
    });
    return box;
  }

  function runSection(run, k) {
    var s = run.summary, ex = run.explain;
    var sec = el("section", { "class": "run", id: "run-" + k });
    sec.appendChild(el("h1", { text: "culedger: " + run.label }));
    sec.appendChild(el("div", { "class": "meta", text: data.tool + " · run " + (s.run_ids.join(", ") || "-") + " · " + s.processes.length + " processes · " + s.devices.length + " GPUs · times are seconds since " + isoTime(s.t0_unix_us) }));
    // A start that failed without a failed allocation (the engine refused it: explain's
    // failed_start) is a failure too: its verdict says so and is styled as one.
    var refused = !s.verdict.failed && (ex.findings || []).some(function (f) { return f.severity === "failure"; });
    var vtext = refused ? ex.findings.filter(function (f) { return f.severity === "failure"; })[0].title + "; " + s.verdict.text : s.verdict.text;
    sec.appendChild(el("div", { "class": "verdict " + (s.verdict.failed || refused ? "failed" : "ok"), id: k === 0 && !data.diff ? "verdict" : null, text: vtext }));
    sec.appendChild(answer(ex));
    var pics = moments(run);
    if (pics) sec.appendChild(pics);
    sec.appendChild(findings(ex));
    sec.appendChild(el("h2", { text: "GPUs" }));
    sec.appendChild(table(["GPU", "processes", "tracked", "peak", "untracked at last query", "used at last query", "capacity", "failures", "biggest category"],
      s.overview.map(function (o) { return [o.host + " " + gpuWords(o.index, o.mig_index, o.uuid_name), o.processes, fmtBytes(o.tracked_bytes), fmtBytes(o.peak_bytes), fmtBytes(o.untracked_bytes), fmtBytes(o.used_bytes), fmtBytes(o.total_bytes), o.failures, o.biggest_category ? o.biggest_category + " " + fmtBytes(o.biggest_category_bytes) : "-"]; }),
      [0, 1, 1, 1, 1, 1, 1, 1, 0]));
    var end = 0;
    s.processes.forEach(function (p) { end = Math.max(end, (p.started_at_us + p.duration_us) / 1e6); });
    run.charts.forEach(function (ch, i) {
      var d = s.devices[i];
      var box = el("div", { "class": "gpu" + (d.failures_total > 0 ? " failed" : ""), "data-gpu": gpuKey(ch.host, ch.index, ch.mig_index) });
      box.appendChild(el("h3", { text: ch.host + " " + gpuWords(ch.index, ch.mig_index, ch.uuid_name) + " — " + fmtBytes(d.live_bytes) + " tracked, peak " + fmtBytes(d.peak_bytes) + (d.total_bytes ? " of " + fmtBytes(d.total_bytes) : "") + (d.failed_requests ? " · " + d.failed_requests + " failed allocation(s)" : "") }));
      timeline(ch, box, { end: end });
      if (d.driver_costs.length) {
        box.appendChild(el("h3", { text: "Hidden driver costs (de-noised)" }));
        box.appendChild(table(["pid", "process", "API", "calls", "bytes", "measured"], d.driver_costs.map(function (c) { return [c.pid, c.label, c.api, c.calls, fmtBytes(c.bytes), fmtBytes(c.measured_bytes)]; }), [1, 0, 0, 1, 1, 1]));
      }
      var det = el("details", i === 0 ? { open: "" } : null, [el("summary", { text: "Call sites on " + gpuWords(ch.index, ch.mig_index, ch.uuid_name) }), icicle(ch.tree)]);
      box.appendChild(det);
      sec.appendChild(box);
    });
    sec.appendChild(el("h2", { text: "Processes" }));
    sec.appendChild(table(["pid", "host", "process", "status", "started", "ran", "pinned host"],
      s.processes.map(function (p) { return [p.pid, p.host, p.label, p.status, fmtSecs(p.started_at_us), fmtSecs(p.duration_us), fmtBytes(p.pinned_live_bytes)]; }),
      [1, 0, 0, 0, 1, 1, 1]));
    sec.appendChild(el("h2", { text: "Largest allocations" }));
    // Alike allocations (same size, category, API and caller) fold into one row over the
    // GPUs and processes that made them: 8 ranks' identical layers are one line.
    var top = [], byKey = {};
    s.devices.forEach(function (d) {
      d.top_allocations.forEach(function (a) {
        var key = [a.bytes, a.category, a.api, a.caller].join("\u0000");
        var r = byKey[key];
        if (!r) { r = byKey[key] = { a: a, gpus: [], pids: [], n: 0, first: a.at_us, last: a.last_at_us }; top.push(r); }
        var g = d.host + " " + gpuWords(d.index, d.mig_index, d.uuid_name);
        if (r.gpus.indexOf(g) < 0) r.gpus.push(g);
        if (r.pids.indexOf(a.pid) < 0) r.pids.push(a.pid);
        r.n += a.count; r.first = Math.min(r.first, a.at_us); r.last = Math.max(r.last, a.last_at_us);
      });
    });
    top.sort(function (x, y) { return y.a.bytes - x.a.bytes; });
    sec.appendChild(table(["GPU", "pid", "size", "category", "API", "at", "caller"],
      top.slice(0, 25).map(function (r) {
        var a = r.a;
        return [r.gpus.length > 1 ? r.gpus.length + " GPUs" : r.gpus[0], r.pids.length > 1 ? r.pids.length + " processes" : a.pid,
          (r.n > 1 ? r.n + " × " : "") + fmtBytes(a.bytes), a.category, a.api,
          r.last > r.first ? fmtSecs(r.first) + "–" + fmtSecs(r.last) : fmtSecs(r.first), a.caller];
      }),
      [0, 1, 1, 0, 0, 1, 0]));
    return sec;
  }

  function diffSection(d) {
    var sec = el("section", { id: "diff" });
    sec.appendChild(el("h1", { text: "Diff: " + d.a + " → " + d.b }));
    var bad = data.runs.some(function (r) { return r.summary.verdict.failed; });
    sec.appendChild(el("div", { "class": "verdict " + (bad ? "failed" : "ok"), id: "verdict", text: d.headline }));
    if (d.what_to_change) {
      sec.appendChild(el("div", { "class": "change", id: "what-to-change" }, [el("h2", { text: "What to change" }), el("p", { "class": "first", text: d.what_to_change })]));
    }
    d.devices.forEach(function (dev) {
      sec.appendChild(el("h3", { text: dev.device + (dev.only_in ? " (only in " + dev.only_in + ")" : "") }));
      var rows = dev.totals.concat(dev.categories, dev.driver_costs).filter(function (r) { return r.a || r.b; });
      sec.appendChild(table(["", "A", "B", "change"], rows.map(function (r) { return [r.name, fmtBytes(r.a), fmtBytes(r.b), fmtDelta(r.delta) + (r.pct != null ? " (" + r.pct.toFixed(1) + "%)" : "")]; }), [0, 1, 1, 1]));
      dev.failures_b.forEach(function (f) { sec.appendChild(el("p", { "class": "meta", text: "B failed: " + f })); });
    });
    return sec;
  }

  app.removeChild(document.getElementById("loading"));
  if (data.diff) app.appendChild(diffSection(data.diff));
  data.runs.forEach(function (r, k) { app.appendChild(runSection(r, k)); });
  document.body.setAttribute("data-rendered", "1");
})();
