//! Pieces of the coding harness that shape how the model is asked: `blocks_grammar` (the file-blocks reply as an llguidance grammar).

pub mod blocks_grammar;
