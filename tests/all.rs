//! All integration tests compile into one binary (one model load shared by many tests).
mod suite;
