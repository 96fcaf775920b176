//! Redaction of secrets in the command line written to `process.argv`.
//!
//! Rules (names compared ASCII case-insensitively; `argv[0]` is never touched):
//! - An option (`-name` or `--name`) is secret when its name, split into words at `-`, `_`
//!   and `.`, has a word `key` or a word ending in `apikey`/`apikeys`, the words `api keys`,
//!   a last word `pass`, `pwd`, `auth` or `cookie`, or the name contains `password`,
//!   `passwd`, `passphrase`, `secret`, `credential` or `authorization`, or contains `token`
//!   other than as `tokens` or `tokenize*` (so `--max-num-batched-tokens` and `--tokenizer`
//!   stay readable). This covers `--api-key`, `--api-keys`, `--token`, `--hf-token`,
//!   `--password`, `--pass`, `--pwd`, `--passphrase`, `--credentials`, `--authorization`,
//!   `--client_secret`, `--redis-password`, ...
//! - `--secret-opt=value` becomes `--secret-opt=<redacted>`.
//! - `--secret-opt value...`: the values after it become `<redacted>` up to the next
//!   argument that starts with `-` (options taking several values: vLLM's `--api-key k1
//!   k2`). The first one is redacted even when it starts with a single `-`; one that starts
//!   with `--` means the option was a flag without a value.
//! - An environment-looking argument `NAME=value` (NAME made of letters, digits, `_`, `.`,
//!   `-`, not starting with a digit or `-`) whose NAME is secret by the same test becomes
//!   `NAME=<redacted>` (`HF_TOKEN=...`, `OPENAI_API_KEY=...`).
//! - Inside any argument (and any option value): the password of a URL
//!   (`postgres://user:<redacted>@host`, `redis://:<redacted>@host`), URL query parameters
//!   with a secret name (`?access_token=<redacted>`) and the signatures and credentials of
//!   signed URLs (a signed URL is a bearer token): Azure SAS `sig`, AWS `X-Amz-Signature`,
//!   `X-Amz-Credential`, `X-Amz-Security-Token`, Google `X-Goog-Signature`,
//!   `X-Goog-Credential`, the older `Signature`, `AWSAccessKeyId`, `GoogleAccessId`, an HTTP header with a secret name
//!   (`-H "Authorization: <redacted>"`, `X-Api-Key: <redacted>`), the string value of a
//!   JSON member with a secret name (`{"hf_token": "<redacted>"}`), and the credentials
//!   after `Bearer`/`Basic` (`Bearer <redacted>`).

/// What replaces a secret value.
pub const REDACTED: &str = "<redacted>";

/// Substrings that make a name secret wherever they appear.
const SECRET_SUBSTRINGS: [&str; 6] = ["password", "passwd", "passphrase", "secret", "credential", "authorization"];

/// Words that make a name secret when they end it (`--db-pass`, but not `--pass-through`).
const SECRET_LAST_WORDS: [&str; 4] = ["pass", "pwd", "auth", "cookie"];

/// Is an option, variable, header or parameter name (without leading dashes) secret?
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    if SECRET_SUBSTRINGS.iter().any(|s| name.contains(s)) {
        return true;
    }
    let words: Vec<&str> = name.split(['-', '_', '.']).collect();
    if words.iter().any(|w| *w == "key" || w.ends_with("apikey") || w.ends_with("apikeys")) {
        return true;
    }
    if words.windows(2).any(|w| w[0] == "api" && w[1] == "keys") {
        return true;
    }
    if words.last().is_some_and(|w| SECRET_LAST_WORDS.contains(w)) {
        return true;
    }
    name.match_indices("token").any(|(at, t)| {
        let rest = &name[at + t.len()..];
        !(rest.starts_with('s') || rest.starts_with("ize"))
    })
}

/// Is a URL query parameter secret: a secret name, or the signature or signing identity of
/// a signed URL (its last word `sig` or `signature`, or an access-key id)?
fn is_secret_query_param(name: &str) -> bool {
    if is_secret_name(name) {
        return true;
    }
    let name = name.to_ascii_lowercase();
    let last = name.rsplit(['-', '_', '.']).next().unwrap_or("");
    matches!(last, "sig" | "signature") || matches!(name.as_str(), "awsaccesskeyid" | "googleaccessid")
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

/// `text` with the password of every URL in it redacted (`scheme://user:pass@host`), and
/// the values of secret query parameters.
fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // Only a real scheme (`[A-Za-z][A-Za-z0-9+.-]*`) introduces an authority.
        let scheme_ok = before[..at]
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
            .next()
            .and_then(|s| s.chars().next())
            .is_some_and(|c| c.is_ascii_alphabetic());
        // The URL runs to the next blank, quote or list separator.
        let end = after.find([' ', '\t', '"', '\'', ',', ';', '<', '>']).unwrap_or(after.len());
        let (url, tail) = after.split_at(end);
        if scheme_ok {
            out.push_str(&redact_url_body(url));
        } else {
            out.push_str(url);
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// One URL after `scheme://`: `[user[:password]@]host[/path][?query][#fragment]`.
fn redact_url_body(url: &str) -> String {
    let auth_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, path) = url.split_at(auth_end);
    let mut out = String::with_capacity(url.len());
    match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(REDACTED);
                }
                None => out.push_str(userinfo),
            }
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    match path.split_once('?') {
        Some((p, query)) => {
            out.push_str(p);
            out.push('?');
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let params: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if is_secret_query_param(k) => format!("{k}={REDACTED}"),
                    _ => kv.to_string(),
                })
                .collect();
            out.push_str(&params.join("&"));
            if let Some(f) = fragment {
                out.push('#');
                out.push_str(f);
            }
        }
        None => out.push_str(path),
    }
    out
}

/// Shortest credential after `Bearer`/`Basic` that is redacted (`basic setup` is prose).
const MIN_CREDENTIAL: usize = 8;

/// `text` with the credentials after every `Bearer`/`Basic` scheme word redacted.
fn redact_auth_schemes(text: &str) -> String {
    // ASCII lowercasing keeps every byte offset.
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut from) = (0, 0);
    loop {
        let next =
            ["bearer ", "basic "].iter().filter_map(|s| lower[from..].find(s).map(|at| (from + at, s.len()))).min();
        let Some((at, len)) = next else { break };
        from = at + len;
        if at > 0 && lower.as_bytes()[at - 1].is_ascii_alphanumeric() {
            continue;
        }
        let start = from + (text[from..].len() - text[from..].trim_start_matches(' ').len());
        let cred = text[start..].find([' ', '"', '\'', ',', ';', '}']).unwrap_or(text.len() - start);
        if cred < MIN_CREDENTIAL {
            continue;
        }
        out.push_str(&text[copied..start]);
        out.push_str(REDACTED);
        copied = start + cred;
        from = copied;
    }
    out.push_str(&text[copied..]);
    out
}

/// `Name: value` with a secret header name (`Authorization`, `X-Api-Key`, `Cookie`...):
/// the value redacted.
fn redact_header(text: &str) -> Option<String> {
    let (name, _) = text.split_once(':')?;
    let name = name.trim();
    let header_like = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
    (header_like && is_secret_name(name)).then(|| format!("{name}: {REDACTED}"))
}

/// `text` with the string value of every JSON member whose key is secret redacted
/// (`{"hf_token": "<redacted>"}` in a JSON-valued option).
fn redact_json_members(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // A quoted key, blanks, a colon, blanks, then a quoted value.
    while let Some(open) = rest.find('"') {
        let after_open = &rest[open + 1..];
        let Some(close) = after_open.find('"') else { break };
        let key = &after_open[..close];
        let tail = &after_open[close + 1..];
        let value = tail.trim_start().strip_prefix(':').map(str::trim_start).and_then(|v| v.strip_prefix('"'));
        let value_end = value.and_then(|v| v.find('"'));
        match (value, value_end) {
            (Some(v), Some(end)) if is_secret_name(key) => {
                let consumed = rest.len() - v.len();
                out.push_str(&rest[..consumed]);
                out.push_str(REDACTED);
                out.push('"');
                rest = &v[end + 1..];
            }
            _ => {
                // Not a secret member: keep everything up to the closing quote of this string.
                let consumed = open + 1 + close + 1;
                out.push_str(&rest[..consumed]);
                rest = &rest[consumed..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Secrets inside a free-form argument or option value.
fn redact_text(text: &str) -> String {
    if let Some(h) = redact_header(text) {
        return h;
    }
    let t = if text.contains("://") { redact_urls(text) } else { text.to_string() };
    let t = if t.contains('"') { redact_json_members(&t) } else { t };
    redact_auth_schemes(&t)
}

/// Redact a command line (see the module documentation). `argv[0]` is kept as is.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    // Values still to redact: after a secret option, until the next option.
    let mut values = Values::None;
    for (i, arg) in argv.iter().enumerate() {
        if i == 0 {
            out.push(arg.clone());
            continue;
        }
        match std::mem::replace(&mut values, Values::None) {
            Values::First if !arg.starts_with("--") => {
                out.push(REDACTED.to_string());
                values = Values::More;
                continue;
            }
            Values::More if !arg.starts_with('-') => {
                out.push(REDACTED.to_string());
                values = Values::More;
                continue;
            }
            _ => {}
        }
        // `-HAuthorization: ...` (curl's short form with the value attached).
        if let Some(h) = arg.strip_prefix("-H").and_then(redact_header) {
            out.push(format!("-H{h}"));
            continue;
        }
        if let Some(name) = option_name(arg) {
            let eq = arg.find('=');
            if is_secret_name(name) {
                match eq {
                    Some(eq) => out.push(format!("{}={REDACTED}", &arg[..eq])),
                    None => {
                        values = Values::First;
                        out.push(arg.clone());
                    }
                }
                continue;
            }
            if let Some(eq) = eq {
                out.push(format!("{}={}", &arg[..eq], redact_text(&arg[eq + 1..])));
                continue;
            }
        } else if let Some((name, value)) = arg.split_once('=') {
            if looks_like_assignment_name(name) {
                let value = if is_secret_name(name) { REDACTED.to_string() } else { redact_text(value) };
                out.push(format!("{name}={value}"));
                continue;
            }
        }
        out.push(redact_text(arg));
    }
    out
}

/// Where `redact_argv` is after a secret option given in the `--opt value` form.
enum Values {
    None,
    /// Its first value comes next (redacted unless it starts with `--`).
    First,
    /// Further values may follow (redacted until the next argument starting with `-`).
    More,
}

#[cfg(test)]
mod tests;
