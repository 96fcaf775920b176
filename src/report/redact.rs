//! Redaction of secrets in the command line written to `process.argv`.
//!
//! Rules (names compared ASCII case-insensitively; `argv[0]` is never touched):
//! - An option (`-name` or `--name`) is secret when its name, split into words at `-`, `_`
//!   and `.`, has a word `key` or a word ending in `apikey`, or the name contains
//!   `password`, `passwd` or `secret`, or contains `token` other than as `tokens` or
//!   `tokenize*` (so `--max-num-batched-tokens` and `--tokenizer` stay readable). This
//!   covers `--api-key`, `--token`, `--hf-token`, `--password`, `--client_secret`, ...
//! - `--secret-opt=value` becomes `--secret-opt=<redacted>`.
//! - `--secret-opt value`: the next argument becomes `<redacted>`, unless it starts with
//!   `--` (then the option was a flag without a value).
//! - An environment-looking argument `NAME=value` (NAME made of letters, digits, `_`, `.`,
//!   `-`, not starting with a digit or `-`) whose NAME is secret by the same test becomes
//!   `NAME=<redacted>` (`HF_TOKEN=...`, `OPENAI_API_KEY=...`).

/// What replaces a secret value.
pub const REDACTED: &str = "<redacted>";

/// Substrings that make a name secret wherever they appear.
const SECRET_SUBSTRINGS: [&str; 3] = ["password", "passwd", "secret"];

/// Is an option or variable name (without leading dashes) secret?
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    if SECRET_SUBSTRINGS.iter().any(|s| name.contains(s)) {
        return true;
    }
    if name.split(['-', '_', '.']).any(|w| w == "key" || w.ends_with("apikey")) {
        return true;
    }
    name.match_indices("token").any(|(at, t)| {
        let rest = &name[at + t.len()..];
        !(rest.starts_with('s') || rest.starts_with("ize"))
    })
}

/// Is `name` shaped like an environment variable or a `key=value` override?
fn looks_like_assignment_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The option name of `arg` (without leading dashes and without `=value`), if it is one.
fn option_name(arg: &str) -> Option<&str> {
    let body = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'))?;
    let name = body.split('=').next().unwrap_or(body);
    (!name.is_empty()).then_some(name)
}

/// Redact a command line (see the module documentation). `argv[0]` is kept as is.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut redact_next = false;
    for (i, arg) in argv.iter().enumerate() {
        if i == 0 {
            out.push(arg.clone());
            continue;
        }
        if std::mem::take(&mut redact_next) && !arg.starts_with("--") {
            out.push(REDACTED.to_string());
            continue;
        }
        if let Some(name) = option_name(arg) {
            if is_secret_name(name) {
                match arg.find('=') {
                    Some(eq) => out.push(format!("{}={REDACTED}", &arg[..eq])),
                    None => {
                        redact_next = true;
                        out.push(arg.clone());
                    }
                }
                continue;
            }
        } else if let Some((name, _)) = arg.split_once('=') {
            if looks_like_assignment_name(name) && is_secret_name(name) {
                out.push(format!("{name}={REDACTED}"));
                continue;
            }
        }
        out.push(arg.clone());
    }
    out
}

#[cfg(test)]
mod tests {
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
        ] {
            assert!(is_secret_name(opt.trim_start_matches('-')), "{opt}");
            assert_eq!(r(&[opt, "v"]), [opt, REDACTED], "{opt}");
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
        assert_eq!(r(&["--token", "a", "--api-key", "b", "c"]), ["--token", REDACTED, "--api-key", REDACTED, "c"]);
        // The value of a secret option is never reinterpreted as an option name.
        assert_eq!(r(&["--token", "-api-key", "z"]), ["--token", REDACTED, "z"]);
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
        let argv: Vec<String> =
            ["/usr/bin/token-server", "token", "secret.txt"].iter().map(|s| s.to_string()).collect();
        assert_eq!(redact_argv(&argv), argv);
        assert!(redact_argv(&[]).is_empty());
    }

    #[test]
    fn double_dash_and_bare_dash() {
        assert_eq!(r(&["--", "--token", "x", "-"]), ["--", "--token", REDACTED, "-"]);
    }
}
