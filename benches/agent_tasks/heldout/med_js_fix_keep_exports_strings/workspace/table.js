const { pad, plural, titleCase } = require("./strings");

function header(columns, width) {
  return columns.map((c) => pad(titleCase(c), width)).join("|");
}

function footer(rows) {
  return plural(rows.length, "row");
}

module.exports = { header, footer };
