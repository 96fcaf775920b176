//! What the real-server tests (`sglang_server.rs`, `vllm_server.rs`) share: the tiny model they
//! serve and a free port.

use std::path::{Path, PathBuf};

/// A tiny Llama (2 layers, hidden 512, 8 heads: divisible by every tensor-parallel size the
/// tests use; vocabulary 1024), its `config.json` written in `dir/tiny-llama`, where the engine
/// reads it with `--load-format dummy`.
pub fn tiny_llama(dir: &Path) -> PathBuf {
    let model = dir.join("tiny-llama");
    std::fs::create_dir_all(&model).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1024,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "torch_dtype": "bfloat16", "hidden_act": "silu", "tie_word_embeddings": false,
        "bos_token_id": 1, "eos_token_id": 2
    });
    std::fs::write(model.join("config.json"), config.to_string()).unwrap();
    model
}

/// A TCP port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
