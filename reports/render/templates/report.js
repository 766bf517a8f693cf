(function () {
  // status filters of the checks table
  var table = document.getElementById('check-rows');
  var buttons = document.querySelectorAll('.filters button');
  buttons.forEach(function (b) {
    b.addEventListener('click', function () {
      table.className = table.className.replace(/ ?only-\w+/g, '') + (b.dataset.status ? ' only-' + b.dataset.status : '');
      buttons.forEach(function (o) { o.classList.toggle('on', o === b); });
    });
  });
  // a table.sortable sorts by the column whose header is clicked, again to reverse. A cell that starts with a number
  // sorts by that number whatever follows it ("99.96 MiB/s", "701.3 (12.0% below cluster median)"; an address such
  // as 10.0.0.12 is no number); a status by severity, worst first, in the order of reports/rate.py WORST_ORDER (the
  // report's "worst first"); numbers come before statuses, statuses before other text.
  var WORST_FIRST = ['fail', 'error', 'warn', 'pass', 'skip'];
  var LEADING_NUMBER = /^\s*([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?)(?!\d|[.,]\d)/;
  function sortKey(text) {
    var status = WORST_FIRST.indexOf(text.trim().toLowerCase());
    if (status >= 0) { return [1, status]; }
    var m = LEADING_NUMBER.exec(text);
    return m ? [0, Number(m[1].replace(/,/g, ''))] : [2, text];
  }
  function compareKeys(x, y) {
    return x[0] - y[0] || (x[0] === 2 ? x[1].localeCompare(y[1]) : x[1] - y[1]);
  }
  document.querySelectorAll('table.sortable').forEach(function (t) {
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th, i) {
      th.addEventListener('click', function () {
        var body = t.tBodies[0];
        var dir = th.dataset.dir === 'asc' ? -1 : 1;
        th.dataset.dir = dir === 1 ? 'asc' : 'desc';
        var keyed = Array.prototype.map.call(body.rows, function (r) {
          var text = r.cells[i].textContent;
          return {row: r, text: text, key: sortKey(text)};
        });
        keyed.sort(function (a, b) {
          return dir * (compareKeys(a.key, b.key) || a.text.localeCompare(b.text));
        });
        keyed.forEach(function (e) { body.appendChild(e.row); });
      });
    });
  });
  // input[data-filter=<table id>] hides the rows without its text; #filter=<text> in the address fills it
  document.querySelectorAll('input[data-filter]').forEach(function (input) {
    var t = document.getElementById(input.dataset.filter);
    function apply() {
      var q = input.value.toLowerCase();
      Array.prototype.forEach.call(t.tBodies[0].rows, function (r) {
        r.hidden = q !== '' && r.textContent.toLowerCase().indexOf(q) < 0;
      });
    }
    input.addEventListener('input', apply);
    var m = /(?:^#|&)filter=([^&]*)/.exec(location.hash);
    if (m) { input.value = decodeURIComponent(m[1]); apply(); }
  });
})();
