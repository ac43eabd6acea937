use super::tensors::TType;
use super::*;

#[test]
fn specs_parse_and_name_their_files() {
    let s = SynthSpec::parse("qwen2:0.5b").unwrap();
    assert_eq!(
        (s.arch, s.shape.layers, s.shape.hidden),
        (Architecture::Qwen2, 24, 896)
    );
    assert_eq!(s.file_name(151936), "qwen2-0.5b-q4_k_m-s0-v151936.gguf");
    assert!(SynthSpec::parse("llama:8b").is_ok());
    let q3 = SynthSpec::parse("qwen3:0.6b").unwrap();
    assert_eq!(
        (q3.shape.head_dim(), q3.shape.hidden, q3.shape.heads),
        (128, 1024, 16)
    );
    let tensors = plan(&q3, 1000);
    let q = tensors
        .iter()
        .find(|t| t.name == "blk.0.attn_q.weight")
        .unwrap();
    assert_eq!(q.dims, [1024, 16 * 128], "q is wider than the hidden state");
    assert!(tensors
        .iter()
        .any(|t| t.name == "blk.27.attn_k_norm.weight"));
    assert!(!tensors.iter().any(|t| t.name.ends_with(".bias")));
    for bad in ["qwen2", "gpt2:1b", "llama:3b", ""] {
        assert!(SynthSpec::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_q4_k_m_mix_follows_llama_cpp() {
    let spec = SynthSpec::parse("qwen2:0.5b").unwrap();
    let tensors = plan(&spec, 1000);
    let ty = |name: &str| tensors.iter().find(|t| t.name == name).unwrap().ttype;
    assert_eq!(
        ty("token_embd.weight"),
        TType::Q5_0,
        "896-wide rows fall back to Q5_0"
    );
    assert_eq!(
        ty("blk.0.attn_v.weight"),
        TType::Q8_0,
        "and Q6_K ones to Q8_0"
    );
    assert_eq!(ty("output.weight"), TType::Q8_0);
    let smol = plan(&SynthSpec::parse("llama:135m").unwrap(), 1000);
    assert!(
        !smol.iter().any(|t| t.name == "output.weight"),
        "SmolLM2 ties its head to the embedding"
    );
    assert_eq!(
        ty("blk.0.ffn_down.weight"),
        TType::Q6K,
        "4864-wide rows: first layers get Q6_K"
    );
    assert_eq!(ty("blk.4.ffn_down.weight"), TType::Q4K);
    assert_eq!(
        ty("blk.5.ffn_down.weight"),
        TType::Q6K,
        "every third layer between"
    );
    assert!(tensors.iter().any(|t| t.name == "blk.23.attn_q.bias"));
    let llama = plan(&SynthSpec::parse("llama:8b").unwrap(), 1000);
    assert!(!llama.iter().any(|t| t.name.ends_with(".bias")));
    assert_eq!(
        llama
            .iter()
            .find(|t| t.name == "output.weight")
            .unwrap()
            .ttype,
        TType::Q6K
    );
}
