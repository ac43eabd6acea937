//! The GGUF tokenizer against llama.cpp's reference ids for both default models (with and without special-token
//! parsing), decode round-trips, token bytes for streaming, special / end-of-generation ids, the explicit error
//! for an unknown pre-tokenizer, and the Hugging Face tokenizer that llguidance's toktrie is built from.

use std::sync::OnceLock;

use agentd::engine::GgufFile;
use agentd::text::tokenizer::{pretokenizer_for, Tokenizer, SUPPORTED_PRETOKENIZERS};
use agentd::text::TextError;
use serde_json::Value;

use crate::suite::common;

/// Each model's tokenizer, built once for all tests (the Qwen GGUF header alone holds 150k tokens and merges).
fn smollm2() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let gguf = GgufFile::open(&common::smollm2_path()).expect("SmolLM2 GGUF opens");
        Tokenizer::from_gguf(&gguf).expect("SmolLM2 tokenizer builds")
    })
}

fn qwen() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let gguf = GgufFile::open(&common::qwen_path()).expect("Qwen GGUF opens");
        Tokenizer::from_gguf(&gguf).expect("Qwen tokenizer builds")
    })
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an id list")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// Checks every reference case; returns the number of cases, and panics listing every mismatch at once.
fn check_reference_cases(tok: &Tokenizer, cases: &[Value]) -> usize {
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("a case name");
        let text = case["text"].as_str().expect("a case text");
        for (parse_special, key) in [(true, "ids"), (false, "ids_special_false")] {
            let expected = ids(&case[key]);
            let got = tok.encode(text, parse_special).expect("encodes");
            if got != expected {
                failures.push(format!(
                    "{name} ({key}):\n  expected {expected:?}\n  got      {got:?}"
                ));
            }
            let decoded = tok.decode(&expected, false).expect("decodes");
            if decoded != text {
                failures.push(format!("{name} ({key}): decode gave {decoded:?}"));
            }
        }
        // The Hugging Face tokenizer handed to llguidance must agree on the special-parsing ids.
        let hf_ids = tok
            .hf()
            .encode(text, false)
            .expect("hf encodes")
            .get_ids()
            .to_vec();
        if hf_ids != ids(&case["ids"]) {
            failures.push(format!("{name}: hf().encode gave {hf_ids:?}"));
        }
        // llama.cpp's per-token pieces (where a piece is whole UTF-8) are our token bytes.
        if let Some(pieces) = case["pieces"].as_array() {
            for (id, piece) in ids(&case["ids"]).into_iter().zip(pieces) {
                let bytes = tok.token_bytes(id);
                if let Ok(s) = std::str::from_utf8(&bytes) {
                    if Some(s) != piece.as_str() {
                        failures.push(format!(
                            "{name}: token {id} bytes {s:?}, llama.cpp piece {piece}"
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn smollm2_matches_llama_cpp_on_every_reference_case() {
    let refdata = common::refdata("smollm2_tokens.json");
    let cases = refdata["cases"].as_array().expect("cases");
    assert_eq!(check_reference_cases(smollm2(), cases), 14);
}

#[test]
fn qwen_matches_llama_cpp_on_every_reference_case() {
    let refdata = common::refdata("qwen25coder_reference.json");
    let cases = refdata["tokens"].as_array().expect("token cases");
    assert_eq!(check_reference_cases(qwen(), cases), 16);
}

#[test]
fn metadata_matches_the_reference() {
    let smol = smollm2();
    let refdata = common::refdata("smollm2_tokens.json");
    assert_eq!(
        smol.vocab_size() as u64,
        refdata["model"]["n_vocab"].as_u64().unwrap()
    );
    assert_eq!(smol.pre(), "smollm");
    assert_eq!(
        (smol.bos_id(), smol.eos_token_id(), smol.add_bos()),
        (Some(1), Some(2), false)
    );

    let qwen = qwen();
    let refdata = common::refdata("qwen25coder_reference.json");
    assert_eq!(
        qwen.vocab_size() as u64,
        refdata["model"]["n_vocab"].as_u64().unwrap()
    );
    assert_eq!(qwen.pre(), "qwen2");
    assert_eq!(
        (qwen.bos_id(), qwen.eos_token_id(), qwen.add_bos()),
        (Some(151643), Some(151645), false)
    );
}

#[test]
fn eos_ids_hold_im_end_and_endoftext_with_the_metadata_eos_first() {
    for tok in [smollm2(), qwen()] {
        let im_end = tok
            .token_id("<|im_end|>")
            .expect("<|im_end|> is in the vocabulary");
        let endoftext = tok
            .token_id("<|endoftext|>")
            .expect("<|endoftext|> is in the vocabulary");
        let eos = tok.eos_ids();
        assert_eq!(eos.first().copied(), tok.eos_token_id());
        assert!(eos.contains(&im_end) && eos.contains(&endoftext), "{eos:?}");
        let mut deduped = eos.to_vec();
        deduped.dedup();
        assert_eq!(deduped.len(), eos.len());
    }
    assert_eq!(smollm2().eos_ids(), &[2, 0]);
    assert_eq!(qwen().eos_ids(), &[151645, 151643]);
}

#[test]
fn control_tokens_are_special_and_user_defined_ones_are_not() {
    let smol = smollm2();
    assert!(smol.is_special(1), "<|im_start|>");
    assert!(!smol.is_special(504), "`The` is ordinary");
    assert!(!smol.is_special(u32::MAX));

    let qwen = qwen();
    assert_eq!(qwen.token_id("<tool_call>"), Some(151657));
    assert!(qwen.is_special(151644), "<|im_start|>");
    assert!(
        !qwen.is_special(151657),
        "<tool_call> is user-defined, not control"
    );
    // User-defined tokens are matched whole even without special parsing (as llama.cpp does).
    assert_eq!(qwen.encode("<tool_call>", false).unwrap(), vec![151657]);
    assert_eq!(qwen.encode("<tool_call>", true).unwrap(), vec![151657]);
}

#[test]
fn blank_tokens_are_the_white_space_only_ones() {
    for tok in [smollm2(), qwen()] {
        let blank = tok.blank_tokens();
        assert_eq!(blank.len(), tok.vocab_size());
        // Indented code: every white-space-only piece of its encoding is blank, every other piece is not.
        let code = "fn main() {\n    if x {\n        println!(\"hi\");\n\t}\n}\n";
        let ids = tok.encode(code, false).unwrap();
        let mut seen = 0;
        for id in ids {
            let text = String::from_utf8_lossy(&tok.token_bytes(id)).into_owned();
            let white =
                !text.is_empty() && text.chars().all(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
            assert_eq!(blank[id as usize], white, "token {id} {text:?}");
            seen += usize::from(white);
        }
        assert!(
            seen >= 3,
            "the indentation is split into white-space tokens"
        );
        let ctrl = tok.eos_ids()[0];
        assert!(!blank[ctrl as usize], "control tokens are never blank");
    }
}

#[test]
fn decode_can_skip_control_tokens() {
    let smol = smollm2();
    let ids = smol.encode("<|im_start|>user\nhi<|im_end|>", true).unwrap();
    assert_eq!(smol.decode(&ids, true).unwrap(), "user\nhi");
    assert_eq!(
        smol.decode(&ids, false).unwrap(),
        "<|im_start|>user\nhi<|im_end|>"
    );
    assert!(matches!(
        smol.decode(&[49152], false),
        Err(TextError::Tokenizer(_))
    ));
}

#[test]
fn token_bytes_split_a_multibyte_character_across_tokens() {
    let qwen = qwen();
    let text = "Hello 👋🏽 world";
    let ids = qwen.encode(text, true).unwrap();
    let pieces: Vec<Vec<u8>> = ids.iter().map(|&id| qwen.token_bytes(id)).collect();
    assert_eq!(pieces.concat(), text.as_bytes());
    assert!(
        pieces.iter().any(|p| std::str::from_utf8(p).is_err()),
        "some token holds part of a character: {pieces:?}"
    );
    assert_eq!(qwen.token_bytes(151644), b"<|im_start|>");
    assert!(qwen.token_bytes(u32::MAX).is_empty());
    assert!(qwen.token_bytes(qwen.vocab_size() as u32).is_empty());
}

#[test]
fn unknown_pretokenizer_is_an_explicit_error() {
    match pretokenizer_for("falcon") {
        Err(TextError::UnsupportedPretokenizer { pre, supported }) => {
            assert_eq!(pre, "falcon");
            assert_eq!(supported, SUPPORTED_PRETOKENIZERS);
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("an unknown pre-tokenizer must not be guessed"),
    }
    for pre in SUPPORTED_PRETOKENIZERS {
        let spec = pretokenizer_for(pre).unwrap_or_else(|e| panic!("{pre}: {e}"));
        assert_eq!(spec.ignore_merges, pre.starts_with("llama"), "{pre}");
    }
}

#[test]
fn toktrie_accepts_the_hf_tokenizer_of_both_models() {
    for tok in [smollm2(), qwen()] {
        let byte_tok = toktrie_hf_tokenizers::ByteTokenizer::from_tokenizer(tok.hf().clone())
            .unwrap_or_else(|e| panic!("{}: {e}", tok.pre()));
        assert_eq!(byte_tok.tokrx_info().vocab_size as usize, tok.vocab_size());
        let trie_bytes = byte_tok.token_bytes();
        let hello = tok.encode(" hello", false).unwrap();
        assert_eq!(hello.len(), 1);
        assert_eq!(trie_bytes[hello[0] as usize], tok.token_bytes(hello[0]));
    }
}

#[test]
fn tokenizer_is_send_sync_and_clone() {
    fn assert_traits<T: Send + Sync + Clone>() {}
    assert_traits::<Tokenizer>();
}

/// llama.cpp's own tokenizer test vectors (`models/ggml-vocab-*.gguf.inp` / `.out` from its repository, copied to
/// `tests/data/vocab/` with its licence): every string, encoded without BOS and without special-token parsing
/// as `test-tokenizer-0` does, must give exactly llama.cpp's ids.
fn llama_cpp_vectors(tok: &Tokenizer, name: &str) -> usize {
    vectors(
        tok,
        &format!("ggml-vocab-{name}.gguf.inp"),
        &format!("ggml-vocab-{name}.gguf.out"),
    )
}

/// The strings of `inp` (in `tests/data/vocab`) must encode to the ids of `out`, one line each.
fn vectors(tok: &Tokenizer, inp: &str, out: &str) -> usize {
    let name = out;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vocab");
    let inp = std::fs::read_to_string(dir.join(inp)).unwrap();
    let out = std::fs::read_to_string(dir.join(out)).unwrap();
    let texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    let expected: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    // The file ends with a separator and a newline: one more (empty) piece than there are answers.
    assert!(
        texts.len() >= expected.len(),
        "{name}: {} vs {}",
        texts.len(),
        expected.len()
    );
    let mut wrong = Vec::new();
    for (text, want) in texts.iter().zip(&expected) {
        let got = tok.encode(text, false).unwrap();
        if &got != want {
            wrong.push(format!("{text:?}: ours {got:?}, llama.cpp {want:?}"));
        }
        assert_eq!(
            tok.decode(&got, false).unwrap().trim_start(),
            text.trim_start(),
            "{name}: {text:?}"
        );
    }
    assert!(wrong.is_empty(), "{name}:\n{}", wrong.join("\n"));
    expected.len()
}

fn vocab_only(name: &str) -> Tokenizer {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/vocab")
        .join(format!("ggml-vocab-{name}.gguf"));
    Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap()
}

/// SentencePiece (`tokenizer.ggml.model = llama`): Llama 2's vocabulary (Mistral v0.1 shares the algorithm)
/// and Phi-3's (the same pieces plus its chat control tokens).
#[test]
fn sentencepiece_matches_llama_cpp_vectors() {
    for name in ["llama-spm", "phi-3"] {
        let tok = vocab_only(name);
        let n = llama_cpp_vectors(&tok, name);
        assert!(n >= 40, "{name}: {n} vectors");
        assert!(tok.add_bos());
        assert_eq!(tok.bos_id(), Some(1));
    }
    let phi3 = vocab_only("phi-3");
    // Control tokens are parsed as special and end turns.
    let end = phi3.token_id("<|end|>").unwrap();
    assert_eq!(
        phi3.encode("<|user|>\nHi<|end|>", true).unwrap()[2..],
        [13, 18567, end]
    );
    assert!(phi3.eos_ids().contains(&end));
    // Bytes the vocabulary has no piece for come back through byte tokens, and decode to the same text.
    let ids = phi3.encode("𝄞 \u{1F980}", false).unwrap();
    assert_eq!(phi3.decode(&ids, false).unwrap(), " 𝄞 \u{1F980}");
}

/// A gzipped vocabulary-only GGUF of `tests/data/vocab`.
fn gzipped_vocab(name: &str) -> Tokenizer {
    use std::io::Read as _;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vocab");
    let file = std::fs::File::open(dir.join(format!("ggml-vocab-{name}.gguf.gz"))).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut raw)
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("vocab.gguf");
    std::fs::write(&path, raw).unwrap();
    Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap()
}

/// Byte-level BPE with `pre = llama-bpe` (Llama 3's vocabulary) and `gpt-2`: llama.cpp's vectors.
#[test]
fn llama3_and_gpt2_bpe_match_llama_cpp_vectors() {
    for (name, pre) in [("llama-bpe", "llama-bpe"), ("gpt-2", "gpt-2")] {
        let tok = gzipped_vocab(name);
        assert_eq!(tok.pre(), pre);
        assert!(llama_cpp_vectors(&tok, name) >= 40);
    }
}

/// Byte-level BPE: Qwen2's vectors on Qwen2.5's vocabulary (the same pieces and merges).
#[test]
fn qwen2_matches_llama_cpp_vectors() {
    assert!(llama_cpp_vectors(qwen(), "qwen2") >= 40);
}

/// A SentencePiece-style `tokenizer.json` (Mistral 7B v0.1's, in the Hugging Face format) converts, as a model
/// folder's would, to a `llama` vocabulary with scores from the merge order: on llama.cpp's test strings it gives
/// exactly the ids of the real `tokenizer.model` run by the sentencepiece library
/// (`mistral-7b-v0.1.sentencepiece.out`).
#[test]
fn sentencepiece_tokenizer_json_converts_like_sentencepiece() {
    use std::io::Read as _;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vocab");
    let work = tempfile::tempdir().unwrap();
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(dir.join("mistral-7b-v0.1.tokenizer.json.gz")).unwrap(),
    )
    .read_to_end(&mut json)
    .unwrap();
    std::fs::write(work.path().join("tokenizer.json"), json).unwrap();
    std::fs::copy(
        dir.join("mistral-7b-v0.1.tokenizer_config.json"),
        work.path().join("tokenizer_config.json"),
    )
    .unwrap();
    let metadata = agentd::engine::files::hf_folder::tokenizer_metadata(work.path()).unwrap();
    let path = work.path().join("vocab.gguf");
    agentd::engine::files::gguf_write::write(&path, &metadata, &[], |_, _| Ok(())).unwrap();
    let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    assert_eq!(
        (tok.bos_id(), tok.eos_token_id(), tok.add_bos()),
        (Some(1), Some(2), true)
    );
    assert_eq!(tok.encode("Hello world", false).unwrap(), [22557, 1526]);
    assert!(
        vectors(
            &tok,
            "ggml-vocab-llama-spm.gguf.inp",
            "mistral-7b-v0.1.sentencepiece.out"
        ) >= 40
    );
}

/// The text layer's own GGUF reader (no tensor library) reads the same metadata as the engine's, key for key,
/// on real files, and the tokenizer built from it encodes alike.
#[test]
fn the_standalone_metadata_reader_agrees_with_the_engines_on_real_files() {
    use agentd::text::GgufMetadata;
    for path in [
        common::smollm2_path(),
        common::qwen_path(),
        common::gemma_path(),
    ] {
        let engine = GgufFile::open(&path).unwrap();
        let standalone = GgufMetadata::open(&path).unwrap();
        let listing = common::metadata_listing;
        let expected = listing(engine.metadata());
        assert!(
            expected.len() > 15,
            "{}: {} keys",
            path.display(),
            expected.len()
        );
        assert_eq!(expected, listing(&standalone), "{}", path.display());
        let text = "def add(a, b):\n    return a + b  # <|im_start|> wörld 12345";
        let a = Tokenizer::from_gguf(&engine)
            .unwrap()
            .encode(text, true)
            .unwrap();
        let b = Tokenizer::from_gguf(&standalone)
            .unwrap()
            .encode(text, true)
            .unwrap();
        assert_eq!(a, b, "{}", path.display());
    }
}
