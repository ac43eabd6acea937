// String helpers for the CLI's output.

function capitalize(word) {
  if (!word) {
    return word;
  }
  return word[0].toUpperCase() + word.slice(1);
}

function titleCase(text) {
  return text
    .split(" ")
    .map((w) => capitalize(w.toLowerCase()))
    .join(" ");
}

function pad(text, width) {
  return text.length >= width ? text : text + " ".repeat(width - text.length);
}

function plural(n, word) {
  return n + " " + (n === 1 ? word : word + "s");
}

module.exports = {
  capitalize,
  titleCase,
  plural,
};
