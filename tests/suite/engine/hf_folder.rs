//! Hugging Face model folders: a synthetic checkpoint exported as a folder (config.json, sharded safetensors in
//! f16/bf16/f32 with an index, tokenizer.json, tokenizer_config.json with the chat template) loads through the
//! converter and gives its GGUF twin's logits, tokens and prompts; the hf-hub cache layout resolves; bad
//! folders are clear errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agentd::engine::{GgufFile, Model, WeightFormat};
use agentd::model_files::fetch::{FetchOptions, ModelSelector};
use agentd::text::template::ChatTemplate;
use agentd::text::tokenizer::Tokenizer;
use candle_core::{DType, Device, Tensor};
use serde_json::json;

use crate::suite::common;

/// Hugging Face's name of a llama.cpp tensor.
fn hf_name(gguf: &str, arch: &str) -> String {
    match gguf {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.").unwrap();
    let (layer, part) = rest.split_once('.').unwrap();
    let (stem, suffix) = part.rsplit_once('.').unwrap();
    let gemma = arch == "gemma3";
    let hf = match stem {
        "attn_norm" => "input_layernorm",
        "ffn_norm" if gemma => "pre_feedforward_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "post_attention_norm" => "post_attention_layernorm",
        "post_ffw_norm" => "post_feedforward_layernorm",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "attn_qkv" => "self_attn.qkv_proj",
        "ffn_up" if arch == "phi3" => "mlp.gate_up_proj",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        other => panic!("{other}"),
    };
    format!("model.layers.{layer}.{hf}.{suffix}")
}

/// Llama's q/k rows back in Hugging Face's halves layout: GGUF row (h, j, a) is HF row (h, a, j).
fn unpermute(t: &Tensor, heads: usize) -> Tensor {
    let (rows, cols) = t.dims2().unwrap();
    let per = rows / heads;
    t.reshape((heads, per / 2, 2, cols))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((rows, cols))
        .unwrap()
}

/// Writes `gguf` as a Hugging Face folder: matrices alternately f16 and bf16, vectors f32, in two shards.
fn export(gguf_path: &Path, arch: &str, folder: &Path) {
    let gguf = GgufFile::open(gguf_path).unwrap();
    let md = |k: &str| gguf.get_u32(&format!("{arch}.{k}")).unwrap() as usize;
    let (heads, kv_heads) = (md("attention.head_count"), md("attention.head_count_kv"));
    let tied = !gguf.content.tensor_infos.contains_key("output.weight");
    let mut reader = gguf.reader().unwrap();
    let mut shards: [HashMap<String, Tensor>; 2] = [HashMap::new(), HashMap::new()];
    let mut weight_map = serde_json::Map::new();
    let mut names: Vec<&String> = gguf.content.tensor_infos.keys().collect();
    names.sort();
    let mut factors = serde_json::Map::new();
    for (i, name) in names.into_iter().enumerate() {
        let t = gguf
            .content
            .tensor(&mut reader, name, &Device::Cpu)
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap();
        if let Some(kind) = name
            .strip_prefix("rope_factors_")
            .and_then(|n| n.strip_suffix(".weight"))
        {
            // LongRoPE's factors live in config.json.
            factors.insert(format!("{kind}_factor"), json!(t.to_vec1::<f32>().unwrap()));
            continue;
        }
        let t = match (arch, name.as_str()) {
            ("llama", n) if n.ends_with("attn_q.weight") => unpermute(&t, heads),
            ("llama", n) if n.ends_with("attn_k.weight") => unpermute(&t, kv_heads),
            // Gemma's norms are stored as w for `x · (1 + w)`.
            ("gemma3", n) if n.ends_with("norm.weight") => (t - 1.0).unwrap(),
            _ => t,
        };
        let dtype = match (t.rank(), i % 2) {
            (1, _) => DType::F32,
            (_, 0) => DType::F16,
            _ => DType::BF16,
        };
        let shard = i % 2;
        let file = format!("model-0000{}-of-00002.safetensors", shard + 1);
        weight_map.insert(hf_name(name, arch), json!(file));
        shards[shard].insert(hf_name(name, arch), t.to_dtype(dtype).unwrap());
    }
    for (i, shard) in shards.iter().enumerate() {
        candle_core::safetensors::save(
            shard,
            folder.join(format!("model-0000{}-of-00002.safetensors", i + 1)),
        )
        .unwrap();
    }
    std::fs::write(
        folder.join("model.safetensors.index.json"),
        json!({"metadata": {}, "weight_map": weight_map}).to_string(),
    )
    .unwrap();
    let (architecture, model_type) = match arch {
        "llama" => ("LlamaForCausalLM", "llama"),
        "gemma3" => ("Gemma3ForCausalLM", "gemma3_text"),
        "phi3" => ("Phi3ForCausalLM", "phi3"),
        _ => ("Qwen2ForCausalLM", "qwen2"),
    };
    let mut config = json!({
        "architectures": [architecture],
        "model_type": model_type,
        "head_dim": md("attention.key_length"),
        "hidden_size": md("embedding_length"),
        "intermediate_size": md("feed_forward_length"),
        "num_hidden_layers": md("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": md("context_length"),
        "rope_theta": gguf.get_f32(&format!("{arch}.rope.freq_base")).unwrap(),
        "rms_norm_eps": gguf.get_f32(&format!("{arch}.attention.layer_norm_rms_epsilon")).unwrap(),
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
    });
    let f32_key = |k: &str| gguf.get_f32(&format!("{arch}.{k}")).unwrap();
    match arch {
        "gemma3" => {
            config["sliding_window"] = json!(md("attention.sliding_window"));
            config["sliding_window_pattern"] = json!(md("attention.sliding_window_pattern"));
            config["rope_local_base_freq"] = json!(f32_key("rope.freq_base_swa"));
            config["rope_scaling"] =
                json!({"rope_type": "linear", "factor": f32_key("rope.scaling.factor")});
        }
        "phi3" => {
            config["partial_rotary_factor"] =
                json!(md("rope.dimension_count") as f64 / md("attention.key_length") as f64);
            config["original_max_position_embeddings"] =
                json!(md("rope.scaling.original_context_length"));
            factors.insert("type".into(), json!("longrope"));
            config["rope_scaling"] = serde_json::Value::Object(factors);
        }
        _ => {}
    }
    std::fs::write(folder.join("config.json"), config.to_string()).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    tok.hf().save(folder.join("tokenizer.json"), false).unwrap();
    let template = ChatTemplate::from_gguf_metadata(&gguf).unwrap();
    let mut tc = json!({
        "chat_template": template.source(),
        "eos_token": template.eos_token(),
        "add_bos_token": tok.add_bos(),
    });
    if !template.bos_token().is_empty() {
        tc["bos_token"] = json!(template.bos_token());
    }
    std::fs::write(folder.join("tokenizer_config.json"), tc.to_string()).unwrap();
}

fn resolve(path: &Path, home: &Path) -> PathBuf {
    let opts = FetchOptions {
        home: home.to_path_buf(),
        offline: true,
        ..FetchOptions::default()
    };
    agentd::engine::files::resolve(&ModelSelector::Path(path.to_path_buf()), &opts)
        .unwrap()
        .path
}

fn folder_matches_its_gguf(spec: &str, arch: &str, tokenizer_from: PathBuf) {
    let (_dir, twin) = super::cpu_engine::synthetic(spec, 0, tokenizer_from);
    let work = tempfile::tempdir().unwrap();
    let folder = work.path().join("tiny-hf");
    std::fs::create_dir(&folder).unwrap();
    export(&twin, arch, &folder);
    let converted = resolve(&folder, work.path());
    assert!(
        converted.starts_with(work.path().join("converted")),
        "{converted:?}"
    );
    // Converted once: the second resolve finds the same file.
    let mtime = std::fs::metadata(&converted).unwrap().modified().unwrap();
    assert_eq!(resolve(&folder, work.path()), converted);
    assert_eq!(
        std::fs::metadata(&converted).unwrap().modified().unwrap(),
        mtime
    );

    let (a, b) = (
        GgufFile::open(&twin).unwrap(),
        GgufFile::open(&converted).unwrap(),
    );
    // The tokenizer and the chat template come through whole.
    let (ta, tb) = (
        Tokenizer::from_gguf(&a).unwrap(),
        Tokenizer::from_gguf(&b).unwrap(),
    );
    assert_eq!(tb.pre(), ta.pre());
    for text in [
        "Hello, world! 123456 ünï ✓ <|im_start|> \n\n  x",
        "fn main() {}\t\r\n",
    ] {
        assert_eq!(
            tb.encode(text, true).unwrap(),
            ta.encode(text, true).unwrap(),
            "{text:?}"
        );
    }
    assert_eq!(
        (tb.bos_id(), tb.eos_token_id(), tb.add_bos()),
        (ta.bos_id(), ta.eos_token_id(), ta.add_bos())
    );
    let msgs = [json!({"role": "user", "content": "hi"})];
    let (ca, cb) = (
        ChatTemplate::from_gguf_metadata(&a).unwrap(),
        ChatTemplate::from_gguf_metadata(&b).unwrap(),
    );
    assert_eq!(
        cb.render(&msgs, None, true, None).unwrap(),
        ca.render(&msgs, None, true, None).unwrap()
    );

    // The same logits, on both forward passes (f16/bf16 weights against the quantized originals they came from).
    let tokens: Vec<u32> = (0..16).map(|i| 300 + (i * 53) % 2000).collect();
    for format in [WeightFormat::Auto, WeightFormat::Native] {
        let ma = Model::load_with_threads(&a, &Device::Cpu, WeightFormat::Native, 2).unwrap();
        let mb = Model::load_with_threads(&b, &Device::Cpu, format, 2).unwrap();
        let (mut ka, mut kb) = (ma.new_sequence(), mb.new_sequence());
        let mut worst = 0f32;
        for (i, &t) in tokens.iter().enumerate() {
            let la: Vec<f32> = ma.forward(&[t], &mut ka).unwrap().to_vec1().unwrap();
            let lb: Vec<f32> = mb.forward(&[t], &mut kb).unwrap().to_vec1().unwrap();
            let d = la
                .iter()
                .zip(&lb)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            worst = worst.max(d);
            assert!(d < 0.25, "{spec} {format}: position {i}: max |Δ| {d}");
            let mut sorted = la.clone();
            sorted.sort_by(|x, y| y.total_cmp(x));
            if sorted[0] - sorted[1] > 0.5 {
                assert_eq!(
                    agentd::engine::argmax(&lb),
                    agentd::engine::argmax(&la),
                    "{spec} {format}: position {i}"
                );
            }
        }
        eprintln!("{spec} folder vs GGUF ({format}): max |Δlogit| {worst:.4}");
    }
}

/// Llama (SmolLM2's tokenizer; q/k rows permuted back from Hugging Face's layout).
#[test]
fn llama_folder_matches_its_gguf() {
    folder_matches_its_gguf("llama:tiny", "llama", common::smollm2_path());
}

/// Gemma 3 (norms stored as `w` for `1 + w`, the window and its period, its own rope base, linear scaling).
#[test]
fn gemma3_folder_matches_its_gguf() {
    folder_matches_its_gguf("gemma3:tiny", "gemma3", common::smollm2_path());
}

/// Phi-3 (fused qkv and gate|up, partial rotation, LongRoPE factors from config.json).
#[test]
fn phi3_folder_matches_its_gguf() {
    folder_matches_its_gguf("phi3:tiny", "phi3", common::smollm2_path());
}

/// Qwen2 (Qwen's tokenizer and control tokens; q/k/v biases).
#[test]
fn qwen2_folder_matches_its_gguf() {
    folder_matches_its_gguf("qwen2:tiny", "qwen2", common::qwen_path());
}

#[test]
fn hub_cache_layout_and_bad_folders() {
    use agentd::model_files::hub_snapshot_in;
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("models--org--tiny");
    std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
    std::fs::create_dir_all(repo.join("snapshots/old999")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
    assert_eq!(
        hub_snapshot_in(root.path(), "org/tiny"),
        Some(repo.join("snapshots/abc123"))
    );
    assert_eq!(hub_snapshot_in(root.path(), "org/other"), None);
    assert_eq!(hub_snapshot_in(root.path(), "../x"), None);

    let work = tempfile::tempdir().unwrap();
    let folder = work.path().join("bad");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(
        folder.join("config.json"),
        r#"{"architectures": ["GPTNeoXForCausalLM"]}"#,
    )
    .unwrap();
    std::fs::write(folder.join("model.safetensors"), b"").unwrap();
    let opts = FetchOptions {
        home: work.path().to_path_buf(),
        offline: true,
        ..FetchOptions::default()
    };
    let err = agentd::engine::files::resolve(&ModelSelector::Path(folder.clone()), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GPTNeoXForCausalLM") && err.contains("not supported"),
        "{err}"
    );
    std::fs::write(folder.join("config.json"), "{not json").unwrap();
    let err = agentd::engine::files::resolve(&ModelSelector::Path(folder.clone()), &opts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("config.json"), "{err}");
    std::fs::remove_file(folder.join("model.safetensors")).unwrap();
    std::fs::write(
        folder.join("config.json"),
        r#"{"architectures": ["LlamaForCausalLM"]}"#,
    )
    .unwrap();
    let err = agentd::engine::files::resolve(&ModelSelector::Path(folder), &opts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no *.safetensors"), "{err}");
}
