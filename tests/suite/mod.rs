mod common;
mod fetch;
mod generate;
mod template;
mod tokenizer;
