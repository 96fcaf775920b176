//! Patterns of the rule language, compiled once when the rules load.
//!
//! A glob has two metacharacters: `*` (any run of bytes, possibly empty, `/` and `.`
//! included) and `?` (exactly one byte). Everything else is literal and case-sensitive.
//! Common shapes compile to plain comparisons (`abc`, `abc*`, `*abc`, `*abc*`); the rest
//! runs a linear-time two-pointer match with backtracking to the last star.

/// How a pattern without metacharacters is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plain {
    /// The whole subject must equal it.
    Whole,
    /// The subject must contain it (native object names: `libnccl` matches `libnccl.so.2`).
    Substring,
    /// The subject must end with it at a `/` boundary, or equal it (file paths:
    /// `sglang/srt/model_executor/model_runner.py`).
    PathSuffix,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    Exact(Box<[u8]>),
    Prefix(Box<[u8]>),
    Suffix(Box<[u8]>),
    Contains(Box<[u8]>),
    PathSuffix(Box<[u8]>),
    /// Anything: `*`.
    Any,
    General(Box<[u8]>),
}

/// A compiled pattern. The text it was compiled from is kept for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    text: Box<str>,
    shape: Shape,
}

fn has_meta(s: &str) -> bool {
    s.bytes().any(|b| b == b'*' || b == b'?')
}

impl Glob {
    /// Compile `pattern`: a glob when it has a metacharacter, else compared as `plain` says.
    /// Fails on an empty pattern.
    pub fn new(pattern: &str, plain: Plain) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("an empty pattern matches nothing; use \"*\" for anything".into());
        }
        let bytes = pattern.as_bytes();
        let boxed = |b: &[u8]| b.to_vec().into_boxed_slice();
        let shape = if !has_meta(pattern) {
            match plain {
                Plain::Whole => Shape::Exact(boxed(bytes)),
                Plain::Substring => Shape::Contains(boxed(bytes)),
                Plain::PathSuffix => Shape::PathSuffix(boxed(bytes.strip_prefix(b"/").unwrap_or(bytes))),
            }
        } else if bytes.iter().all(|&b| b == b'*') {
            Shape::Any
        } else {
            let inner = |b: &[u8]| !b.is_empty() && !b.iter().any(|&c| c == b'*' || c == b'?');
            let n = bytes.len();
            match (bytes[0] == b'*', bytes[n - 1] == b'*') {
                (false, true) if inner(&bytes[..n - 1]) => Shape::Prefix(boxed(&bytes[..n - 1])),
                (true, false) if inner(&bytes[1..]) => Shape::Suffix(boxed(&bytes[1..])),
                (true, true) if n >= 2 && inner(&bytes[1..n - 1]) => Shape::Contains(boxed(&bytes[1..n - 1])),
                _ => Shape::General(boxed(bytes)),
            }
        };
        Ok(Glob { text: pattern.into(), shape })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, subject: &str) -> bool {
        let s = subject.as_bytes();
        match &self.shape {
            Shape::Exact(p) => s == &p[..],
            Shape::Prefix(p) => s.starts_with(p),
            Shape::Suffix(p) => s.ends_with(p),
            Shape::Contains(p) => contains(s, p),
            Shape::PathSuffix(p) => s.ends_with(p) && (s.len() == p.len() || s[s.len() - p.len() - 1] == b'/'),
            Shape::Any => true,
            Shape::General(p) => wildcard(p, s),
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// `*`/`?` matching over bytes: O(len(p) * len(s)) worst case, linear in practice.
fn wildcard(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || (p[pi] != b'*' && p[pi] == s[si])) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str) -> Glob {
        Glob::new(p, Plain::Whole).unwrap()
    }

    #[test]
    fn shapes_compile_to_simple_comparisons() {
        assert_eq!(g("abc").shape, Shape::Exact((*b"abc").into()));
        assert_eq!(g("abc*").shape, Shape::Prefix((*b"abc").into()));
        assert_eq!(g("*abc").shape, Shape::Suffix((*b"abc").into()));
        assert_eq!(g("*abc*").shape, Shape::Contains((*b"abc").into()));
        assert_eq!(g("**").shape, Shape::Any);
        assert!(matches!(g("a*b").shape, Shape::General(_)));
        assert!(matches!(g("*a?c*").shape, Shape::General(_)));
        assert!(matches!(g("*").shape, Shape::Any));
    }

    #[test]
    fn globs_match_like_shells_do_without_path_rules() {
        let cases = [
            ("libnccl*", "libnccl.so.2", true),
            ("libnccl*", "xlibnccl.so", false),
            ("*TokenToKVPool._create_buffers", "MHATokenToKVPool._create_buffers", true),
            ("*TokenToKVPool._create_buffers", "MHATokenToKVPool.__init__", false),
            ("*.load_model", "ModelRunner.load_model", true),
            ("*.load_model", "load_model", false),
            ("Module.*", "Module._apply.<locals>.convert", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*", "", true),
            ("*x*y*", "__x__y", true),
            ("*x*y*", "__y__x", false),
            ("lib*.so.?", "libnvshmem_host.so.3", true),
            ("ab", "abc", false),
        ];
        for (p, s, want) in cases {
            assert_eq!(g(p).matches(s), want, "{p} on {s}");
        }
    }

    #[test]
    fn plain_patterns_follow_their_comparison() {
        let sub = Glob::new("nccl", Plain::Substring).unwrap();
        assert!(sub.matches("libnccl.so.2") && !sub.matches("librccl.so"));
        let file = Glob::new("sglang/srt/model_executor/model_runner.py", Plain::PathSuffix).unwrap();
        assert!(file.matches("/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py"));
        assert!(file.matches("sglang/srt/model_executor/model_runner.py"));
        assert!(!file.matches("/x/mysglang/srt/model_executor/model_runner.py"), "only at a / boundary");
        assert!(!file.matches("/x/sglang/srt/model_executor/model_runner.pyc"));
        let rooted = Glob::new("/torch/nn/modules/module.py", Plain::PathSuffix).unwrap();
        assert!(rooted.matches("/usr/lib/python3/dist-packages/torch/nn/modules/module.py"));
        // A glob is always a whole match, whatever the plain comparison.
        let globbed = Glob::new("*/engines/*.py", Plain::PathSuffix).unwrap();
        assert!(globbed.matches("/a/engines/x.py") && !globbed.matches("/a/engines/x.pyc"));
    }

    #[test]
    fn empty_patterns_are_refused() {
        assert!(Glob::new("", Plain::Whole).is_err());
        assert_eq!(g("x*").as_str(), "x*");
    }

    #[test]
    fn general_matching_agrees_with_a_reference_on_many_inputs() {
        // Reference: exponential recursive matcher.
        fn reference(p: &[u8], s: &[u8]) -> bool {
            match (p.first(), s.first()) {
                (None, _) => s.is_empty(),
                (Some(b'*'), _) => reference(&p[1..], s) || (!s.is_empty() && reference(p, &s[1..])),
                (Some(b'?'), Some(_)) => reference(&p[1..], &s[1..]),
                (Some(&c), Some(&d)) => c == d && reference(&p[1..], &s[1..]),
                (Some(_), None) => false,
            }
        }
        let alphabet = [b'a', b'b', b'*', b'?'];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..4000 {
            let plen = (next() % 6) as usize + 1;
            let p: Vec<u8> = (0..plen).map(|_| alphabet[(next() % 4) as usize]).collect();
            let slen = (next() % 7) as usize;
            let s: Vec<u8> = (0..slen).map(|_| alphabet[(next() % 2) as usize]).collect();
            let (ps, ss) = (String::from_utf8(p.clone()).unwrap(), String::from_utf8(s.clone()).unwrap());
            assert_eq!(g(&ps).matches(&ss), reference(&p, &s), "{ps} on {ss}");
        }
    }
}
