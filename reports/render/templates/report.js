(function () {
  var table = document.getElementById('check-rows');
  var buttons = document.querySelectorAll('.filters button');
  buttons.forEach(function (b) {
    b.addEventListener('click', function () {
      table.className = 'checks' + (b.dataset.status ? ' only-' + b.dataset.status : '');
      buttons.forEach(function (o) { o.classList.toggle('on', o === b); });
    });
  });
})();
