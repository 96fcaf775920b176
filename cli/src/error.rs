//! The CLI's error: a one-line message and the exit status it maps to.

use std::fmt;

/// Exit status for bad input: unreadable paths, bad JSON, bad budget syntax.
pub const EXIT_BAD_INPUT: i32 = 2;

#[derive(Debug)]
pub struct Fail {
    pub code: i32,
    pub message: String,
}

impl Fail {
    /// Bad input (exit status 2).
    pub fn input(message: impl Into<String>) -> Self {
        Fail { code: EXIT_BAD_INPUT, message: message.into() }
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub type Result<T> = std::result::Result<T, Fail>;
