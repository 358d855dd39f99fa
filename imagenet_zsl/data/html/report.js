/* imagenet-zsl report --html: sorting, the row picker and the per-class view. Plain JavaScript,
   packaged and copied beside the page: no server, no network. A row's per-class data is
   classes/ROW.js, which calls ZSL_CELL(ROW, data) when the row is picked. */
(function () {
  "use strict";

  var SHOWN = 1000; // class rows drawn at once (filter to find the others)
  var views = {};
  var current = null;
  var order = { key: 2, descending: false }; // the class table: hit@1, worst first

  function numberOf(cell) {
    var text = cell.getAttribute("data-value");
    return text === null || text === "" ? null : parseFloat(text);
  }

  /* Sort a table's body by one column: numbers by data-value (missing ones last), text as text. */
  function sortBy(table, index, header) {
    var numeric = header.getAttribute("data-type") === "number";
    var previous = header.getAttribute("aria-sort");
    var descending = previous ? previous === "ascending" : numeric;
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    rows.sort(function (a, b) {
      var x = a.cells[index], y = b.cells[index];
      if (numeric) {
        var u = numberOf(x), v = numberOf(y);
        if (u === null || v === null) { return (u === null) - (v === null); }
        return descending ? v - u : u - v;
      }
      var c = x.textContent.localeCompare(y.textContent);
      return descending ? -c : c;
    });
    rows.forEach(function (row) { table.tBodies[0].appendChild(row); });
    Array.prototype.forEach.call(header.parentNode.cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  function status(text) {
    var node = document.getElementById("class-status");
    if (node) { node.textContent = text; }
  }

  function element(tag, text, attrs) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = text; }
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }

  function pct(value) { return value === null ? "–" : (100 * value).toFixed(2); }

  function hops(data, d) {
    if (data.graph === "none") { return "no graph"; }
    if (d < 0) { return "> " + data.limit + " hops or outside the graph"; }
    return d === 1 ? "1 hop" : d + " hops";
  }

  function classCell(data, index) {
    var td = element("td");
    var name = data.names[index];
    if (name) { td.appendChild(element("span", name + " ")); }
    td.appendChild(element("span", data.wnids[index], { "class": "wnid" }));
    return td;
  }

  function sortKey(row, key) {
    if (key === 0) { return row.label; }
    if (key === 1) { return row.images; }
    if (key === row.hits.length + 2) { return row.mistaken.length ? row.mistaken[0][1] / row.images : null; }
    return row.hits[key - 2];
  }

  function render() {
    var data = views[current];
    var table = document.getElementById("class-table");
    if (!data || !table) { return; }
    var head = element("tr");
    var names = ["class", "images"].concat(data.ks.map(function (k) { return "hit@" + k; }), ["mistaken for"]);
    names.forEach(function (name, i) {
      var th = element("th", name, { scope: "col", "data-key": String(i) });
      if (i === order.key) { th.setAttribute("aria-sort", order.descending ? "descending" : "ascending"); }
      head.appendChild(th);
    });
    table.tHead.replaceChildren(head);
    var needle = (document.getElementById("class-filter") || { value: "" }).value.trim().toLowerCase();
    var rows = data.rows.map(function (r) {
      return { index: r[0], images: r[1], hits: r[2], mistaken: r[3],
               label: (data.names[r[0]] + " " + data.wnids[r[0]]).toLowerCase() };
    }).filter(function (r) {
      if (!needle) { return true; }
      return r.label.indexOf(needle) >= 0 || r.mistaken.some(function (m) {
        return (data.names[m[0]] + " " + data.wnids[m[0]]).toLowerCase().indexOf(needle) >= 0;
      });
    });
    rows.sort(function (a, b) {
      var u = sortKey(a, order.key), v = sortKey(b, order.key);
      if (u === null || v === null) { return (u === null) - (v === null); }
      var c = typeof u === "string" ? u.localeCompare(v) : u - v;
      return order.descending ? -c : c;
    });
    var body = document.createDocumentFragment();
    rows.slice(0, SHOWN).forEach(function (r) {
      var tr = element("tr");
      tr.appendChild(classCell(data, r.index));
      tr.appendChild(element("td", String(r.images), { "data-value": String(r.images) }));
      r.hits.forEach(function (h) { tr.appendChild(element("td", pct(h), { "data-value": h === null ? "" : String(h) })); });
      var td = element("td");
      r.mistaken.forEach(function (m) {
        var line = element("span", null, { "class": "confusion" });
        line.appendChild(element("span", (data.names[m[0]] || "") + " "));
        line.appendChild(element("span", data.wnids[m[0]], { "class": "wnid" }));
        line.appendChild(element("span", " " + Math.round(100 * m[1] / r.images) + "% · "));
        line.appendChild(element("span", hops(data, m[2]), { "class": "hops" }));
        td.appendChild(line);
      });
      if (!r.mistaken.length) { td.textContent = "–"; }
      tr.appendChild(td);
      body.appendChild(tr);
    });
    table.tBodies[0].replaceChildren(body);
    var shown = Math.min(rows.length, SHOWN);
    status(data.title + ": " + shown + " of " + data.rows.length + " classes shown" +
           (rows.length > SHOWN ? " (filter or sort to see the others)" : ""));
  }

  function load(id) {
    current = id;
    Array.prototype.forEach.call(document.querySelectorAll("#results-table tr[data-cell]"), function (tr) {
      tr.classList.toggle("picked", tr.getAttribute("data-cell") === id);
    });
    if (views[id]) { render(); return; }
    status("loading " + id + " …");
    var script = document.createElement("script");
    script.src = "classes/" + id + ".js";
    script.onerror = function () { status("could not load " + script.src); };
    document.body.appendChild(script);
  }

  window.ZSL_CELL = function (id, data) {
    views[id] = data;
    if (id === current) { render(); }
  };

  document.addEventListener("click", function (event) {
    var header = event.target.closest("th");
    if (header && header.closest("#class-table")) {
      var key = parseInt(header.getAttribute("data-key"), 10);
      order = { key: key, descending: order.key === key ? !order.descending : key > 0 };
      render();
      return;
    }
    if (header && header.closest("table.sortable thead")) {
      sortBy(header.closest("table"), header.cellIndex, header);
      return;
    }
    var row = event.target.closest("#results-table tr[data-cell]");
    var select = document.getElementById("cell-select");
    if (row && select) {
      select.value = row.getAttribute("data-cell");
      load(select.value);
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var select = document.getElementById("cell-select");
    var filter = document.getElementById("class-filter");
    if (select) {
      select.addEventListener("change", function () { load(select.value); });
      load(select.value);
    }
    if (filter) { filter.addEventListener("input", render); }
  });
})();
