// The alert pages work without scripts; this only makes them quicker to use: the list's
// filters apply on change, and forms marked data-confirm ask before they submit.

const filters = document.getElementById("alert-filters");
if (filters) {
  filters.querySelectorAll("select").forEach((select) => {
    select.addEventListener("change", () => filters.submit());
  });
  filters.querySelectorAll("[data-autosubmit-hide]").forEach((button) => { button.hidden = true; });
}

document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});

document.body.dataset.ready = "1";
