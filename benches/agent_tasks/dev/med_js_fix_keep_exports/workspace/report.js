const { average, roundTo } = require("./mathutils");

function summary(samples) {
  return "mean " + roundTo(average(samples), 2) + " over " + samples.length + " samples";
}

module.exports = { summary };

if (require.main === module) {
  console.log(summary([3, 4, 5]));
}
