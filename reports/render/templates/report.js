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
  // a table.sortable sorts by the column whose header is clicked (numbers as numbers), again to reverse
  document.querySelectorAll('table.sortable').forEach(function (t) {
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th, i) {
      th.addEventListener('click', function () {
        var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var dir = th.dataset.dir === 'asc' ? -1 : 1;
        th.dataset.dir = dir === 1 ? 'asc' : 'desc';
        rows.sort(function (a, b) {
          var x = a.cells[i].textContent, y = b.cells[i].textContent, nx = Number(x), ny = Number(y);
          return dir * (x !== '' && y !== '' && !isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y));
        });
        rows.forEach(function (r) { body.appendChild(r); });
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
