// The deployment form works without scripts; this adds a structured way to write the vLLM
// arguments: pick one of the version's arguments (the reference table under the form), give
// a value in an input of its type, and it is written into the field, as JSON (or as a flag
// when the field holds flags). The server checks the result as any other (deployments.check).

const field = document.getElementById("id_args");
const catalog = [...document.querySelectorAll("#arg-catalog tr[data-arg]")].map((tr) => ({
  dest: tr.dataset.arg, flag: tr.dataset.flag, kind: tr.dataset.kind,
}));

function element(tag, attrs = {}, text = "") {
  const el = document.createElement(tag);
  Object.assign(el, attrs);
  if (text) el.textContent = text;
  return el;
}

// The typed value of the input for an argument of `kind`; undefined when it does not read.
export function typedValue(kind, input) {
  if (kind === "bool") return input.checked;
  const text = input.value.trim();
  if (text === "") return undefined;
  if (kind === "int") return /^-?\d+$/.test(text) ? Number(text) : undefined;
  if (kind === "float") return Number.isFinite(Number(text)) ? Number(text) : undefined;
  if (kind === "strs") return text.split(/\s+/);
  return text;
}

// `args` (the field's text) with `dest` set to `value`: JSON stays JSON, flags get a flag.
export function withArgument(text, spec, value) {
  const trimmed = text.trim();
  if (trimmed.startsWith("-")) {
    const tokens = spec.kind === "bool" ? (value ? [spec.flag] : [`--no-${spec.flag.slice(2)}`])
      : [spec.flag, ...[].concat(value).map(String)];
    return `${trimmed} ${tokens.join(" ")}`;
  }
  const args = trimmed ? JSON.parse(trimmed) : {};
  if (typeof args !== "object" || args === null || Array.isArray(args)) throw new Error("not a JSON object");
  args[spec.dest] = value;
  return JSON.stringify(args, null, 2);
}

function build() {
  const pick = element("select", { id: "arg-pick", ariaLabel: "Argument" });
  pick.append(element("option", { value: "" }, "Add an argument…"));
  for (const spec of catalog) pick.append(element("option", { value: spec.dest }, `${spec.dest} (${spec.kind})`));
  let input = element("input", { id: "arg-value", type: "text", ariaLabel: "Value", disabled: true });
  const add = element("button", { type: "button", id: "arg-add", className: "secondary", disabled: true }, "Add");
  const note = element("span", { className: "help", id: "arg-note" });
  const spec = () => catalog.find((s) => s.dest === pick.value);
  pick.addEventListener("change", () => {
    const s = spec();
    const kind = s?.kind;
    const next = element("input", {
      id: "arg-value", ariaLabel: "Value", disabled: !s,
      type: kind === "bool" ? "checkbox" : kind === "int" || kind === "float" ? "number" : "text",
      step: kind === "float" ? "any" : "1", checked: kind === "bool",
    });
    input.replaceWith(next);
    input = next;
    add.disabled = !s;
    note.textContent = "";
  });
  add.addEventListener("click", () => {
    const s = spec();
    const value = s && typedValue(s.kind, input);
    if (value === undefined) {
      note.textContent = `${s?.dest}: give a value of type ${s?.kind}`;
      return;
    }
    try {
      field.value = withArgument(field.value, s, value);
      note.textContent = `${s.dest} set`;
    } catch (err) {
      note.textContent = `The field does not hold a JSON object or flags (${err.message}): fix it first`;
    }
  });
  const row = element("div", { className: "arg-editor" });
  row.append(pick, input, add, note);
  field.after(row);
}

if (field && catalog.length) build();
document.body.dataset.ready = "1";
