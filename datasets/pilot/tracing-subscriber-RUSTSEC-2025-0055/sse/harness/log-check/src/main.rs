//! log-check FILE: log the untrusted text of FILE through a
//! `tracing_subscriber::fmt` subscriber (colours off, output captured) and
//! check that no terminal control character reaches the output.
//!
//! FILE's first line says how the text is logged, the rest is the text:
//!   message   as part of an event's message (`info!("... {}", text)`)
//!   error     as an error value's `Display` (`error!(error = &err as &dyn Error, ...)`)
//!   pretty    as part of a message, with the pretty formatter
//!
//! With colours off, the formatter itself writes no control character, so
//! any ESC, BEL, BS, FF, DEL or C1 control (U+0080..U+009F) in the output
//! came from the logged text and can drive the terminal that shows the log.
//!
//! Exit status: 0 when the output is free of them, 1 when it is not, 2 on a
//! usage or I/O error.
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::{env, fmt, fs, process};

use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[derive(Debug)]
struct UpstreamError(String);

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "upstream said: {}", self.0)
    }
}

impl std::error::Error for UpstreamError {}

fn is_control(c: char) -> bool {
    matches!(c, '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f') || ('\u{80}'..='\u{9f}').contains(&c)
}

fn main() {
    let path = env::args_os().nth(1).unwrap_or_else(|| {
        eprintln!("usage: log-check FILE");
        process::exit(2)
    });
    let bytes = fs::read(&path).unwrap_or_else(|err| {
        eprintln!("log-check: cannot read {:?}: {}", path, err);
        process::exit(2)
    });
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (mode, payload) = text.split_once('\n').unwrap_or((text.as_str(), ""));
    let payload = payload.trim_end_matches('\n').to_string();

    let capture = Capture::default();
    let builder = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_ansi(false)
        .without_time()
        .with_target(false);
    match mode.trim() {
        "message" => tracing::subscriber::with_default(builder.finish(), || {
            tracing::info!("login failed for user {}", payload);
        }),
        "error" => tracing::subscriber::with_default(builder.finish(), || {
            let err = UpstreamError(payload.clone());
            tracing::warn!(error = &err as &dyn std::error::Error, "request failed");
        }),
        "pretty" => tracing::subscriber::with_default(builder.pretty().finish(), || {
            tracing::info!("login failed for user {}", payload);
        }),
        other => {
            eprintln!("log-check: unknown mode {:?}", other);
            process::exit(2);
        }
    }

    let output = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
    let found: Vec<String> = output.chars().filter(|&c| is_control(c)).map(|c| format!("U+{:04X}", c as u32)).collect();
    if found.is_empty() {
        println!("log output is free of terminal control characters:\n{}", output.escape_debug());
        process::exit(0);
    }
    eprintln!(
        "log-check: the log output holds {} terminal control character(s) from the logged text: {}",
        found.len(),
        found.join(" ")
    );
    eprintln!("log-check: output, escaped for display: {}", output.escape_debug());
    process::exit(1);
}
