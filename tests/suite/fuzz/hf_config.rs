//! Fuzz target: a Hugging Face folder's `config.json`. A tiny real folder (one llama-style layer of width 16 in
//! `model.safetensors`, a byte-level `tokenizer.json`) is converted with each mutated config, and what
//! converts is opened, loaded and run one forward pass — as `agentd serve --model DIR` would. The property:
//! converted and run, or a clear error; never a panic, an abort from an absurd allocation, or a hang.

use std::collections::HashMap;
use std::path::Path;

use agentd::engine::{GgufFile, Model, Tokenizer, WeightFormat};
use candle_core::{Device, Tensor};

use super::fuzz_with;

/// The folder's weights: every tensor the seeds' architectures (Llama, Qwen2) name, f32, deterministic.
fn write_weights(folder: &Path, vocab: usize) {
    let (h, ff) = (16usize, 32usize);
    let mut n = 0u32;
    let mut tensor = |shape: &[usize]| {
        n += 1;
        let count: usize = shape.iter().product();
        let values: Vec<f32> = (0..count)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ n) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
    };
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert("model.embed_tokens.weight".into(), tensor(&[vocab, h]));
    t.insert("lm_head.weight".into(), tensor(&[vocab, h]));
    t.insert("model.norm.weight".into(), tensor(&[h]));
    let l = "model.layers.0";
    for (name, shape) in [
        ("input_layernorm.weight", vec![h]),
        ("post_attention_layernorm.weight", vec![h]),
        ("self_attn.q_proj.weight", vec![h, h]),
        ("self_attn.k_proj.weight", vec![h, h]),
        ("self_attn.v_proj.weight", vec![h, h]),
        ("self_attn.q_proj.bias", vec![h]),
        ("self_attn.k_proj.bias", vec![h]),
        ("self_attn.v_proj.bias", vec![h]),
        ("self_attn.o_proj.weight", vec![h, h]),
        ("mlp.gate_proj.weight", vec![ff, h]),
        ("mlp.up_proj.weight", vec![ff, h]),
        ("mlp.down_proj.weight", vec![h, ff]),
    ] {
        t.insert(format!("{l}.{name}"), tensor(&shape));
    }
    candle_core::safetensors::save(&t, folder.join("model.safetensors")).unwrap();
}

#[test]
fn hugging_face_folder_configs() {
    let dict: &[&[u8]] = &[
        b"\"num_attention_heads\": 0",
        b"\"head_dim\": 18446744073709551615",
        b"\"rope_scaling\": {\"rope_type\": \"llama3\"}",
        b"\"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": []}",
        b"\"partial_rotary_factor\": 1e300",
        b"\"tie_word_embeddings\": true",
        b"\"architectures\": [\"Gemma3ForCausalLM\"]",
        b"\"max_position_embeddings\": 4294967296",
    ];
    let root = tempfile::tempdir().unwrap();
    let folder = root.path().join("tiny-model");
    std::fs::create_dir(&folder).unwrap();
    let tokenizer =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/hf_tokenizer/byte_level.json");
    std::fs::copy(&tokenizer, folder.join("tokenizer.json")).unwrap();
    std::fs::write(
        folder.join("tokenizer_config.json"),
        r#"{"bos_token": "<s>", "eos_token": "</s>",
            "chat_template": "{% for m in messages %}<|im_start|>{{ m['content'] }}{% endfor %}"}"#,
    )
    .unwrap();
    write_weights(&folder, 270);
    let home = root.path().join("home");
    fuzz_with("hf_config", dict, true, |input, _| {
        std::fs::write(folder.join("config.json"), input).unwrap();
        let converted = agentd::engine::files::hf_folder::convert(&folder, &home);
        let path = match converted {
            Ok(p) => p,
            Err(e) => {
                if std::env::var("AGENTD_FUZZ_DEBUG").is_ok() {
                    eprintln!("refused: {e}");
                }
                return false;
            }
        };
        let run = || -> Result<(), agentd::engine::EngineError> {
            let gguf = GgufFile::open(&path)?;
            let model = Model::load_with_threads(&gguf, &Device::Cpu, WeightFormat::Auto, 1)?;
            let mut seq = model.new_sequence();
            model.forward(&[1, 2, 3], &mut seq)?;
            Tokenizer::from_gguf(&gguf)?.encode("hello", true)?;
            Ok(())
        };
        let result = run();
        if let (Err(e), Ok(_)) = (&result, std::env::var("AGENTD_FUZZ_DEBUG")) {
            eprintln!("refused: {e}");
        }
        let through = result.is_ok();
        let _ = std::fs::remove_dir_all(home.join("converted"));
        through
    });
}
