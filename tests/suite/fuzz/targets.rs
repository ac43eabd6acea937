//! The fuzz targets: a remote server's SSE, session JSONL, tool-call text of every format, JSON schemas through
//! the grammar compiler, settings TOML, a Hugging Face folder's `tokenizer.json` (converted, loaded, run), and a
//! whole model file (a tiny GGUF: header, tokenizer, chat template, weights and a forward pass).

use std::path::Path;

use agentd::engine::{
    ChatTemplate, ConstraintSpec, FinishReason, GgufFile, Model, OutputAssembler, Tokenizer,
    ToolCallFormat, WeightFormat,
};
use agentd::text::GgufMetadata;

use super::{chunks, fuzz, fuzz_with};
use crate::suite::engine::constraint;

#[test]
fn sse_from_a_remote_server() {
    let dict: &[&[u8]] = &[
        b"data: ",
        b"event: ",
        b"\n\n",
        b"\r\n",
        b"\r",
        b": keep-alive\n",
        b"[DONE]",
    ];
    fuzz("sse", dict, |input, rng| {
        let mut parser = agentd::provider::remote::sse::SseParser::new();
        let mut total = 0;
        for piece in chunks(input, rng) {
            match parser.push(piece) {
                Ok(events) => total += events.iter().map(|e| e.data.len()).sum::<usize>(),
                Err(_) => return false,
            }
        }
        let ok = parser.finish().is_ok();
        // Events carry no more data than came in.
        assert!(total <= input.len());
        ok
    });
}

#[test]
fn session_files() {
    let dict: &[&[u8]] = &[
        b"{\"type\":\"message\",",
        b"\"parentId\":",
        b"\"id\":\"",
        b"null",
        b"\n",
        b"{\"type\":\"session\",\"version\":3,",
    ];
    fuzz("session", dict, |input, _| {
        match agentd::session::file::parse(Path::new("fuzz.jsonl"), input) {
            Ok(loaded) => {
                // What was accepted is a prefix of the bytes.
                assert!(loaded.valid_len as usize <= input.len());
                loaded.torn_line.is_none()
            }
            Err(_) => false,
        }
    });
}

#[test]
fn tool_call_text_of_every_format() {
    let dict: &[&[u8]] = &[
        b"<tool_call>",
        b"</tool_call>",
        b"{\"name\": \"read\", \"arguments\": {",
        b"[TOOL_CALLS]",
        b"<|python_tag|>",
        b"```json\n",
        b"\"}}",
        b"<think>",
        b"</think>",
    ];
    let formats = ToolCallFormat::all();
    fuzz("tool_calls", dict, |input, rng| {
        let text = String::from_utf8_lossy(input);
        let format = formats[rng.below(formats.len())];
        let mut out = OutputAssembler::new(format, true).with_tools(vec![
            "read".into(),
            "write".into(),
            "add".into(),
        ]);
        // Pieces cut at character boundaries, as a decoder emits them.
        let chars: Vec<char> = text.chars().collect();
        let mut at = 0;
        while at < chars.len() {
            let n = 1 + rng.below(8.min(chars.len() - at));
            let piece: String = chars[at..at + n].iter().collect();
            if out.push(&piece).is_err() {
                return false;
            }
            at += n;
        }
        let _ = out.finish(FinishReason::Eos);
        for call in out.tool_calls() {
            // A call handed out has arguments that parse as JSON.
            assert!(
                serde_json::from_str::<serde_json::Value>(&call.arguments).is_ok(),
                "{format:?}: {call:?}"
            );
        }
        !out.tool_calls().is_empty()
    });
}

#[test]
fn json_schemas_through_the_grammar_compiler() {
    let dict: &[&[u8]] = &[
        b"\"type\": \"object\"",
        b"\"$ref\": \"#/$defs/a\"",
        b"\"$defs\": {\"a\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/a\"}}}",
        b"\"pattern\": \"(a+)+$\"",
        b"\"minItems\": 1000000",
        b"\"maxLength\": 99999999999",
        b"\"anyOf\": [",
        b"\"enum\": [",
        b"\"required\": [\"x\"]",
        b"\"additionalProperties\": false",
    ];
    let model = constraint::smol();
    for seed in super::seeds("schemas") {
        let spec: ConstraintSpec =
            serde_json::from_slice(&seed).expect("every seed is a constraint spec");
        model
            .factory
            .compile(&spec, ToolCallFormat::HERMES)
            .expect("every seed compiles");
    }
    fuzz_with("schemas", dict, true, |input, _| {
        let Ok(spec) = serde_json::from_slice::<ConstraintSpec>(input) else {
            return false;
        };
        model.factory.compile(&spec, ToolCallFormat::HERMES).is_ok()
    });
}

#[test]
fn settings_files() {
    let dict: &[&[u8]] = &[
        b"[engine]\n",
        b"[router]\n",
        b"[[models]]\n",
        b"kv_cache_memory = \"",
        b"max_num_seqs = 0\n",
        b"= -1\n",
        b"\"\"\"",
    ];
    fuzz("settings", dict, |input, _| {
        let text = String::from_utf8_lossy(input);
        match agentd::config::Config::from_toml(&text, "fuzz.toml") {
            Ok(config) => config.engine_options().is_ok(),
            Err(_) => false,
        }
    });
}

#[test]
fn model_files() {
    let dict: &[&[u8]] = &[
        &[0xff; 8],
        &[0; 8],
        b"llama.",
        b"tokenizer.ggml.",
        b"general.alignment",
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    fuzz("gguf", dict, |input, _| {
        std::fs::write(&path, input).unwrap();
        let standalone = GgufMetadata::open(&path);
        let Ok(gguf) = GgufFile::open(&path) else {
            return false;
        };
        // The text layer's own reader agrees with candle's on every file candle reads.
        assert_eq!(
            crate::suite::common::metadata_listing(gguf.metadata()),
            crate::suite::common::metadata_listing(&standalone.expect("candle read this file")),
        );
        let Ok(tokenizer) = Tokenizer::from_gguf(&gguf) else {
            return false;
        };
        let _ = tokenizer.encode("Hello <|im_start|> wörld", true);
        if let Ok(template) = ChatTemplate::from_gguf(&gguf, &tokenizer) {
            let _ = template.render(
                &[serde_json::json!({"role": "user", "content": "hi"})],
                None,
                true,
                None,
            );
        }
        let Ok(model) =
            Model::load_with_threads(&gguf, &candle_core::Device::Cpu, WeightFormat::Auto, 1)
        else {
            return false;
        };
        let mut seq = model.new_sequence();
        model.forward(&[1, 2, 3], &mut seq).is_ok()
    });
}

/// Writes the seed of `model_files`: a whole model in a few kilobytes (byte-level BPE of 256 tokens and two
/// control tokens, a ChatML template, one llama layer of width 16). Run once by hand:
/// `cargo test --release --test all write_the_tiny_gguf_seed -- --ignored`.
#[test]
#[ignore]
fn write_the_tiny_gguf_seed() {
    use candle_core::quantized::gguf_file::Value;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    // GPT-2's byte-to-character map.
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xa1..=0xac);
    printable.extend(0xae..=0xff);
    let mut extra = 0;
    let mut tokens = Vec::new();
    for b in 0u32..256 {
        let c = match printable.contains(&b) {
            true => b,
            false => {
                extra += 1;
                255 + extra
            }
        };
        tokens.push(char::from_u32(c).unwrap().to_string());
    }
    tokens.push("<|im_start|>".into());
    tokens.push("<|im_end|>".into());
    let vocab = tokens.len();
    let mut types = vec![1i32; 256];
    types.extend([3, 3]);
    let template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}\
                    {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let (h, ff, heads) = (16usize, 32usize, 2u32);
    let meta: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("general.alignment", Value::U32(32)),
        ("llama.block_count", Value::U32(1)),
        ("llama.context_length", Value::U32(64)),
        ("llama.embedding_length", Value::U32(h as u32)),
        ("llama.feed_forward_length", Value::U32(ff as u32)),
        ("llama.attention.head_count", Value::U32(heads)),
        ("llama.attention.head_count_kv", Value::U32(heads)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.dimension_count", Value::U32(8)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges", Value::Array(Vec::new())),
        ("tokenizer.ggml.bos_token_id", Value::U32(256)),
        ("tokenizer.ggml.eos_token_id", Value::U32(257)),
        ("tokenizer.chat_template", Value::String(template.into())),
    ];
    let mut n = 0u32;
    let mut tensor = |rows: usize, cols: usize| {
        n += 1;
        let values: Vec<f32> = (0..rows * cols)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ n) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let t = match rows {
            1 => Tensor::from_vec(values, cols, &Device::Cpu).unwrap(),
            _ => Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap(),
        };
        QTensor::quantize(&t, GgmlDType::F32).unwrap()
    };
    let tensors: Vec<(&str, QTensor)> = vec![
        ("token_embd.weight", tensor(vocab, h)),
        ("blk.0.attn_norm.weight", tensor(1, h)),
        ("blk.0.attn_q.weight", tensor(h, h)),
        ("blk.0.attn_k.weight", tensor(h, h)),
        ("blk.0.attn_v.weight", tensor(h, h)),
        ("blk.0.attn_output.weight", tensor(h, h)),
        ("blk.0.ffn_norm.weight", tensor(1, h)),
        ("blk.0.ffn_gate.weight", tensor(ff, h)),
        ("blk.0.ffn_up.weight", tensor(ff, h)),
        ("blk.0.ffn_down.weight", tensor(h, ff)),
        ("output_norm.weight", tensor(1, h)),
        ("output.weight", tensor(vocab, h)),
    ];
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/gguf/tiny.gguf");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let mut file = std::fs::File::create(&out).unwrap();
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (*k, v)).collect();
    candle_core::quantized::gguf_file::write(&mut file, &meta_refs, &tensor_refs).unwrap();
    drop(file);
    // The seed itself must load and run.
    let gguf = GgufFile::open(&out).unwrap();
    let model =
        Model::load_with_threads(&gguf, &candle_core::Device::Cpu, WeightFormat::Auto, 1).unwrap();
    let mut seq = model.new_sequence();
    model.forward(&[1, 2, 3], &mut seq).unwrap();
    let tokenizer = Tokenizer::from_gguf(&gguf).unwrap();
    assert!(!tokenizer.encode("hello", true).unwrap().is_empty());
}

#[test]
fn hugging_face_tokenizer_files() {
    let dict: &[&[u8]] = &[
        b"\"type\": \"BPE\"",
        b"\"byte_fallback\": true",
        b"\"merges\": [",
        b"\"added_tokens\": [",
        b"\"special\": true",
        b"\"<0xFF>\"",
        b"\\u2581",
    ];
    let dir = tempfile::tempdir().unwrap();
    // The folder's other file, as a chat model's folder has it (BOS/EOS by text, a template).
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true,
            "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}"#,
    )
    .unwrap();
    fuzz_with("hf_tokenizer", dict, true, |input, _| {
        let folder = dir.path();
        std::fs::write(folder.join("tokenizer.json"), input).unwrap();
        let Ok(metadata) = agentd::engine::files::hf_folder::tokenizer_metadata(folder) else {
            return false;
        };
        // What a folder converts to must be a vocabulary the engine's tokenizer loads or refuses clearly.
        let path = folder.join("vocab.gguf");
        if agentd::engine::files::gguf_write::write(&path, &metadata, &[], |_, _| Ok(())).is_err() {
            return false;
        }
        let Ok(gguf) = GgufFile::open(&path) else {
            return false;
        };
        let Ok(tokenizer) = Tokenizer::from_gguf(&gguf) else {
            return false;
        };
        let Ok(ids) = tokenizer.encode("hello world <|im_start|> ünï 🙂", true) else {
            return false;
        };
        tokenizer.decode(&ids, false).is_ok()
    });
}
