//! reserve-check FILE: replay the steps of a scenario file on `BytesMut`
//! handles and check what `reserve` promises.
//!
//! One step a line (`#` starts a comment):
//!   buffer N       the current handle becomes a fresh BytesMut of N bytes
//!   split_off N    keep [0, N) as the "other" handle, the rest is current
//!   split_to N     [0, N) becomes the "other" handle, current keeps the rest
//!   drop_other     drop the other handle (current then owns the storage alone)
//!   advance N      skip N bytes at the front of the current handle
//!   reserve X      current.reserve(X); X is a number or max-K (usize::MAX - K)
//!
//! After `reserve(X)` returns, the handle must be able to hold len + X bytes:
//! its capacity must be at least that, and no allocation is larger than
//! isize::MAX bytes. A panic (an overflow refused, as documented) is fine:
//! it is caught, and reported without a panic message.
//!
//! Exit status: 0 when every reserve kept its promise or panicked, 1 when
//! one returned with a capacity the storage cannot have, 2 on a bad file.
use std::panic::{self, AssertUnwindSafe};
use std::{env, fs, process};

use bytes::{Buf, BytesMut};

fn number(word: &str) -> usize {
    let parsed = match word.strip_prefix("max-") {
        Some(rest) => rest.parse::<usize>().ok().map(|k| usize::MAX - k),
        None => word.parse::<usize>().ok(),
    };
    parsed.unwrap_or_else(|| {
        eprintln!("reserve-check: not a number: {:?}", word);
        process::exit(2)
    })
}

fn main() {
    let path = env::args_os().nth(1).unwrap_or_else(|| {
        eprintln!("usage: reserve-check FILE");
        process::exit(2)
    });
    let text = fs::read_to_string(&path).unwrap_or_else(|err| {
        eprintln!("reserve-check: cannot read {:?}: {}", path, err);
        process::exit(2)
    });

    let mut current = BytesMut::new();
    let mut other: Option<BytesMut> = None;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let step = words.next().unwrap_or("");
        let arg = words.next().map(number);
        match (step, arg) {
            ("buffer", Some(n)) => {
                let data: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
                current = BytesMut::from(&data[..]);
            }
            ("split_off", Some(n)) => {
                let tail = current.split_off(n);
                other = Some(std::mem::replace(&mut current, tail));
            }
            ("split_to", Some(n)) => other = Some(current.split_to(n)),
            ("drop_other", None) => other = None,
            ("advance", Some(n)) => current.advance(n),
            ("reserve", Some(additional)) => {
                let len = current.len();
                // reserve documents a panic when the new capacity overflows:
                // that refusal is caught here, quietly (no panic report).
                let hook = panic::take_hook();
                panic::set_hook(Box::new(|_| {}));
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
                    current.reserve(additional);
                    current.capacity()
                }));
                panic::set_hook(hook);
                let capacity = match outcome {
                    Ok(capacity) => capacity,
                    Err(payload) => {
                        let why = payload
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        println!("reserve({}) on {} bytes refused ({})", additional, len, why);
                        process::exit(0);
                    }
                };
                let needed = len.checked_add(additional);
                match needed {
                    Some(needed) if needed <= isize::MAX as usize && capacity >= needed => {
                        println!("reserve({}) on {} bytes: capacity {}", additional, len, capacity);
                    }
                    _ => {
                        eprintln!(
                            "reserve-check: reserve({}) on {} bytes returned, and the handle now \
                             claims a capacity of {} bytes, which its storage does not have",
                            additional, len, capacity
                        );
                        process::exit(1);
                    }
                }
            }
            _ => {
                eprintln!("reserve-check: bad step: {:?}", line);
                process::exit(2);
            }
        }
    }
    drop(other);
}
