// Number helpers shared by the dashboard's widgets.

function clamp(x, lo, hi) {
  return Math.min(Math.max(x, lo), hi);
}

function lerp(a, b, t) {
  return a + (b - a) * t;
}

function average(xs) {
  if (xs.length === 0) {
    return 0;
  }
  let sum = 0;
  for (let i = 1; i < xs.length; i++) {
    sum += xs[i];
  }
  return sum / xs.length;
}

function roundTo(x, digits) {
  const f = Math.pow(10, digits);
  return Math.round(x * f) / f;
}

module.exports = { clamp, lerp, average, roundTo };
