use super::*;

fn r(args: &[&str]) -> Vec<String> {
    let mut argv = vec!["prog".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let mut out = redact_argv(&argv);
    assert_eq!(out.remove(0), "prog");
    out
}

#[test]
fn named_options_with_separate_values() {
    for opt in ["--api-key", "--token", "--hf-token", "--password", "--API-KEY", "--Token"] {
        assert_eq!(r(&[opt, "s3cr3t", "--model", "m"]), [opt, REDACTED, "--model", "m"], "{opt}");
    }
}

#[test]
fn equals_forms() {
    assert_eq!(r(&["--api-key=abc"]), ["--api-key=<redacted>"]);
    assert_eq!(r(&["--token=a=b=c", "x"]), ["--token=<redacted>", "x"]);
    assert_eq!(r(&["--password="]), ["--password=<redacted>"]);
    assert_eq!(r(&["-token=abc"]), ["-token=<redacted>"]);
}

#[test]
fn pattern_options() {
    for opt in [
        "--db-password",
        "--mypassword",
        "--client_secret",
        "--secret",
        "--SecretFile",
        "--auth-token",
        "--hf_token",
        "--access-token-file",
        "--aws-access-key",
        "--ssh_key",
        "--key",
        "--openai-apikey",
        "--passwd",
        "--wandb.api_key",
        "--api-keys",
        "--authorization",
        "--Authorization",
        "--proxy-authorization",
        "--passphrase",
        "--key-passphrase",
        "--pwd",
        "--db-pwd",
        "--pass",
        "--db-pass",
        "--credentials",
        "--gcp-credentials-json",
        "--credential",
        "--auth",
        "--basic-auth",
        "--cookie",
        "--redis-password",
        "--admin-api-key",
        "--ngrok-authtoken",
    ] {
        assert!(is_secret_name(opt.trim_start_matches('-')), "{opt}");
        assert_eq!(r(&[opt, "v"]), [opt, REDACTED], "{opt}");
        assert_eq!(r(&[&format!("{opt}=v")]), [format!("{opt}={REDACTED}")], "{opt}=");
    }
}

#[test]
fn ordinary_options_are_kept() {
    for opt in [
        "--model",
        "--max-num-batched-tokens",
        "--max-tokens",
        "--tokenizer",
        "--tokenizer-mode",
        "--keyboard",
        "--monkey",
        "--ssl-keyfile",
        "--keys",
        "--port",
        "-p",
        "--pass-through",
        "--passes",
        "--author",
        "--auth-mode",
        "--cwd",
        "--bypass-cache",
    ] {
        assert!(!is_secret_name(opt.trim_start_matches('-')), "{opt}");
        assert_eq!(r(&[opt, "v"]), [opt, "v"], "{opt}");
    }
    // A secret word next to a plural/tokenizer word still counts.
    assert!(is_secret_name("tokenizer-token"));
    assert!(is_secret_name("tokens-secret"));
}

#[test]
fn flag_without_value_does_not_eat_the_next_option() {
    assert_eq!(
        r(&["--use-auth-token", "--model", "llama", "--token", "t"]),
        ["--use-auth-token", "--model", "llama", "--token", REDACTED]
    );
    // A value starting with a single dash is still treated as the secret.
    assert_eq!(r(&["--password", "-x1"]), ["--password", REDACTED]);
    // Secret option at the very end: nothing to redact, no panic.
    assert_eq!(r(&["--api-key"]), ["--api-key"]);
}

#[test]
fn consecutive_secret_options() {
    assert_eq!(r(&["--token", "a", "--api-key", "b", "--port", "c"]), ["--token", R, "--api-key", R, "--port", "c"]);
    // The value of a secret option is never reinterpreted as an option name; the values
    // after it are secret up to the next option.
    assert_eq!(r(&["--token", "-api-key", "z", "-v"]), ["--token", R, R, "-v"]);
}

const R: &str = REDACTED;

#[test]
fn several_values_up_to_the_next_option() {
    // vLLM: `api_key: list[str] | None` (nargs "+"), "the server will require one of
    // these keys" (vllm/entrypoints/openai/cli_args.py, FrontendArgs.api_key).
    assert_eq!(r(&["--api-key", "k1", "k2", "k3", "--port", "8000"]), ["--api-key", R, R, R, "--port", "8000"]);
    assert_eq!(r(&["--api-keys", "k1,k2", "--x"]), ["--api-keys", R, "--x"]);
    assert_eq!(r(&["--api_keys=k1,k2"]), ["--api_keys=<redacted>"]);
}

#[test]
fn header_forms() {
    assert_eq!(r(&["-H", "Authorization: Bearer sk-abc123456"]), ["-H", "Authorization: <redacted>"]);
    assert_eq!(r(&["--header", "X-Api-Key: abc"]), ["--header", "X-Api-Key: <redacted>"]);
    assert_eq!(r(&["--header=authorization: Basic dXNlcjpwYXNz"]), ["--header=authorization: <redacted>"]);
    assert_eq!(r(&["-HCookie: session=xyz"]), ["-HCookie: <redacted>"]);
    assert_eq!(r(&["-H", "Content-Type: application/json"]), ["-H", "Content-Type: application/json"]);
    assert_eq!(r(&["--host", "localhost:8000"]), ["--host", "localhost:8000"]);
    // The scheme's credentials anywhere (a JSON header map, a quoted line).
    assert_eq!(
        r(&["--extra-headers", r#"{"Authorization": "Bearer hf_abcdefgh12345"}"#]),
        ["--extra-headers", r#"{"Authorization": "<redacted>"}"#]
    );
    assert_eq!(r(&["--note", "send Bearer hf_abcdefgh12345 first"]), ["--note", "send Bearer <redacted> first"]);
    assert_eq!(r(&["--authorization", "Bearer abc"]), ["--authorization", R]);
    assert_eq!(r(&["--mode", "basic setup"]), ["--mode", "basic setup"], "prose, not a credential");
}

#[test]
fn secret_members_of_json_arguments() {
    assert_eq!(
        r(&["--model-loader-extra-config", r#"{"hf_token": "hf_x", "n": 2, "api_key":"k", "tokenizer": "t"}"#]),
        [
            "--model-loader-extra-config",
            r#"{"hf_token": "<redacted>", "n": 2, "api_key":"<redacted>", "tokenizer": "t"}"#
        ]
    );
    assert_eq!(r(&[r#"--cfg={"password" : "p", "user": "u"}"#]), [r#"--cfg={"password" : "<redacted>", "user": "u"}"#]);
    // Keys that are values, odd quoting: left as they are.
    assert_eq!(r(&[r#"["token", "x"]"#]), [r#"["token", "x"]"#]);
    assert_eq!(r(&[r#"say "hi"#]), [r#"say "hi"#]);
    assert_eq!(r(&[r#"{"secret": 5}"#]), [r#"{"secret": 5}"#], "only string values");
}

/// Any input, however odd (multi-byte characters next to every delimiter), gives an
/// answer without panicking, and redacting twice changes nothing more.
#[test]
fn arbitrary_text_never_panics() {
    let pieces = [
        "://",
        "@",
        ":",
        "\"",
        "'",
        "?",
        "&",
        "=",
        "#",
        "/",
        "Bearer ",
        "basic ",
        "é",
        "€",
        "🙂",
        "token",
        "key",
        "-",
        "--",
        " ",
        "a",
        "pw",
        ",",
        "{",
        "}",
        "Authorization",
        "-H",
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..4000 {
        let mut args = vec!["prog".to_string()];
        for _ in 0..(seed % 5 + 1) {
            let mut a = String::new();
            for _ in 0..(seed % 9) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                a.push_str(pieces[(seed % pieces.len() as u64) as usize]);
            }
            args.push(a);
        }
        let once = redact_argv(&args);
        assert_eq!(once.len(), args.len());
        assert_eq!(redact_argv(&once), once, "{args:?}");
    }
}

#[test]
fn passwords_inside_urls() {
    let cases = [
        ("postgres://user:pass@db:5432/app", "postgres://user:<redacted>@db:5432/app"),
        ("https://user:pw@example.com/x?y=1", "https://user:<redacted>@example.com/x?y=1"),
        ("redis://:pw@10.0.0.1:6379/0", "redis://:<redacted>@10.0.0.1:6379/0"),
        ("mongodb+srv://u:p%40ss@cluster0/db", "mongodb+srv://u:<redacted>@cluster0/db"),
        ("https://x:y@h1,redis://:z@h2", "https://x:<redacted>@h1,redis://:<redacted>@h2"),
        ("https://host/v1?api_key=abc&model=m", "https://host/v1?api_key=<redacted>&model=m"),
        ("https://h/p?access_token=t#frag", "https://h/p?access_token=<redacted>#frag"),
        ("http://user@host:8000", "http://user@host:8000"),
        ("http://localhost:8000/v1", "http://localhost:8000/v1"),
        ("s3://bucket/key", "s3://bucket/key"),
    ];
    for (url, want) in cases {
        assert_eq!(r(&[url]), [want], "positional {url}");
        assert_eq!(r(&["--url", url]), ["--url", want], "--url {url}");
        assert_eq!(r(&[&format!("--url={url}")]), [format!("--url={want}")], "--url={url}");
        assert_eq!(r(&[&format!("DATABASE_URL={url}")]), [format!("DATABASE_URL={want}")], "env {url}");
    }
    assert_eq!(r(&["DATABASE_PASSWORD=x"]), ["DATABASE_PASSWORD=<redacted>"]);
}

#[test]
fn signed_urls_lose_their_signatures_and_credentials() {
    let cases = [
        (
            "https://acct.blob.core.windows.net/c/model.bin?sv=2022-11-02&ss=b&srt=o&sp=r\
             &se=2026-01-01T00:00:00Z&spr=https&sig=AbC%2Bd%2FeF%3D",
            "https://acct.blob.core.windows.net/c/model.bin?sv=2022-11-02&ss=b&srt=o&sp=r\
             &se=2026-01-01T00:00:00Z&spr=https&sig=<redacted>",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAEXAMPLE%2F20260101%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-Security-Token=IQo\
             &X-Amz-SignedHeaders=host&X-Amz-Signature=0a1b2c3d",
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=<redacted>&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600\
             &X-Amz-Security-Token=<redacted>&X-Amz-SignedHeaders=host&X-Amz-Signature=<redacted>",
        ),
        (
            "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256\
             &X-Goog-Credential=sa%40p.iam.gserviceaccount.com%2F20260101%2Fauto\
             &X-Goog-Date=20260101T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host\
             &X-Goog-Signature=5f6e",
            "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256\
             &X-Goog-Credential=<redacted>&X-Goog-Date=20260101T000000Z&X-Goog-Expires=900\
             &X-Goog-SignedHeaders=host&X-Goog-Signature=<redacted>",
        ),
        (
            "https://b.s3.amazonaws.com/k?AWSAccessKeyId=AKIA&Expires=1767225600&Signature=vjb%2B",
            "https://b.s3.amazonaws.com/k?AWSAccessKeyId=<redacted>&Expires=1767225600&Signature=<redacted>",
        ),
        (
            "https://storage.googleapis.com/b/o?GoogleAccessId=sa&Expires=1&Signature=x",
            "https://storage.googleapis.com/b/o?GoogleAccessId=<redacted>&Expires=1&Signature=<redacted>",
        ),
    ];
    for (url, want) in cases {
        assert_eq!(r(&[url]), [want], "positional");
        assert_eq!(r(&["--model-url", url]), ["--model-url", want]);
        assert_eq!(r(&[&format!("--weights={url}")]), [format!("--weights={want}")]);
        assert_eq!(r(&[&format!("MODEL_URL={url}")]), [format!("MODEL_URL={want}")]);
    }
    // Parameters that only look alike stay.
    let plain = "https://h/p?signed=1&design=a&sigma=2&x-amz-date=3";
    assert_eq!(r(&[plain]), [plain]);
}

fn argv(line: &[&str]) -> Vec<String> {
    line.iter().map(|s| s.to_string()).collect()
}

/// Real launch lines. Flag names from each project's own CLI definition.
#[test]
fn real_launch_lines() {
    let secrets = [
        "sk-sglang-0123",
        "sk-admin-4567",
        "sk-vllm-k1",
        "sk-vllm-k2",
        "hf_tok89",
        "tgi-key-77",
        "ngrok-2x",
        "r3d1s-pw",
    ];
    #[rustfmt::skip]
    let lines: [(&[&str], &[&str]); 5] = [
        (
            // SGLang: --api-key, --admin-api-key (python/sglang/srt/server_args.py,
            // ServerArgs.add_cli_args).
            &["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2",
              "--api-key", "sk-sglang-0123", "--admin-api-key=sk-admin-4567", "--port", "30000"],
            &["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2",
              "--api-key", R, "--admin-api-key=<redacted>", "--port", "30000"],
        ),
        (
            // vLLM: --api-key (several keys; vllm/entrypoints/openai/cli_args.py, FrontendArgs)
            // and --hf-token (vllm/engine/arg_utils.py, EngineArgs.hf_token).
            &["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size", "2",
              "--api-key", "sk-vllm-k1", "sk-vllm-k2", "--hf-token", "hf_tok89", "--max-num-batched-tokens", "8192"],
            &["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size", "2",
              "--api-key", R, R, "--hf-token", R, "--max-num-batched-tokens", "8192"],
        ),
        (
            // TGI: text-generation-launcher --api-key, --ngrok-authtoken (launcher/src/main.rs,
            // Args); the Hub token in HF_TOKEN.
            &["text-generation-launcher", "--model-id", "mistralai/Mistral-7B-v0.1", "--num-shard", "2",
              "--api-key", "tgi-key-77", "--ngrok-authtoken=ngrok-2x", "HF_TOKEN=hf_tok89"],
            &["text-generation-launcher", "--model-id", "mistralai/Mistral-7B-v0.1", "--num-shard", "2",
              "--api-key", R, "--ngrok-authtoken=<redacted>", "HF_TOKEN=<redacted>"],
        ),
        (
            // Ray: ray start --redis-password (python/ray/scripts/scripts.py, `start`).
            &["ray", "start", "--head", "--port=6379", "--redis-password=r3d1s-pw", "--num-gpus", "8"],
            &["ray", "start", "--head", "--port=6379", "--redis-password=<redacted>", "--num-gpus", "8"],
        ),
        (
            // A Ray worker joining with the address and the password; a health check with
            // the key as a header.
            &["ray", "start", "--address", "redis://:r3d1s-pw@10.0.0.1:6379", "--redis-password", "r3d1s-pw",
              "-H", "Authorization: Bearer sk-vllm-k1"],
            &["ray", "start", "--address", "redis://:<redacted>@10.0.0.1:6379", "--redis-password", R,
              "-H", "Authorization: <redacted>"],
        ),
    ];
    for (line, want) in lines {
        let got = redact_argv(&argv(line));
        assert_eq!(got, argv(want));
        for secret in secrets {
            assert!(!got.iter().any(|a| a.contains(secret)), "{secret} kept in {got:?}");
        }
    }
}

#[test]
fn environment_looking_arguments() {
    assert_eq!(
        r(&["HF_TOKEN=hf_abc", "OPENAI_API_KEY=sk-1", "DB_PASSWORD=x", "aws.secret=y", "PATH=/bin", "lr=0.1"]),
        [
            "HF_TOKEN=<redacted>",
            "OPENAI_API_KEY=<redacted>",
            "DB_PASSWORD=<redacted>",
            "aws.secret=<redacted>",
            "PATH=/bin",
            "lr=0.1"
        ]
    );
    // Not an assignment name: left alone.
    assert_eq!(r(&["a b token=x", "1token=x", "=token"]), ["a b token=x", "1token=x", "=token"]);
    assert_eq!(r(&["MAX_TOKENS=512"]), ["MAX_TOKENS=512"]);
}

#[test]
fn argv0_and_plain_positionals_untouched() {
    let argv: Vec<String> = ["/usr/bin/token-server", "token", "secret.txt"].iter().map(|s| s.to_string()).collect();
    assert_eq!(redact_argv(&argv), argv);
    assert!(redact_argv(&[]).is_empty());
}

#[test]
fn double_dash_and_bare_dash() {
    assert_eq!(r(&["--", "--token", "x", "-"]), ["--", "--token", REDACTED, "-"]);
}
