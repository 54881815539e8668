//! host-check FILE: run each host name of FILE (one a line, blank lines and
//! lines starting with `#` skipped) through the crate's domain-to-ASCII and
//! domain-to-Unicode conversions, and check that a name has one ASCII form.
//!
//! For a name written in ASCII, every conversion that succeeds must agree
//! with the name itself: ToASCII must give back the name (in lower case), and
//! the ASCII form of what ToUnicode gives must be the name (in lower case).
//! For any name, ToASCII must be stable: converting its result again gives
//! the same result. A conversion that fails is fine.
//!
//! Exit status: 0 when every name passed, 1 when one did not (each is
//! printed), 2 on a usage or I/O error.
use std::{env, fs, process};

fn check(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let ascii = idna::domain_to_ascii(name);
    let strict = idna::domain_to_ascii_strict(name);
    let (unicode, unicode_result) = idna::domain_to_unicode(name);

    if name.is_ascii() {
        let expected = name.to_ascii_lowercase();
        for (what, result) in [("ToASCII", &ascii), ("strict ToASCII", &strict)] {
            if let Ok(out) = result {
                if *out != expected {
                    problems.push(format!("{} turned {:?} into {:?}", what, name, out));
                }
            }
        }
        if unicode_result.is_ok() {
            match idna::domain_to_ascii(&unicode) {
                Ok(back) if back == expected => {}
                Ok(back) => problems.push(format!(
                    "ToUnicode turned {:?} into {:?}, whose ASCII form is {:?}",
                    name, unicode, back
                )),
                Err(_) => problems.push(format!(
                    "ToUnicode turned {:?} into {:?}, which has no ASCII form",
                    name, unicode
                )),
            }
        }
    }
    if let Ok(out) = &ascii {
        match idna::domain_to_ascii(out) {
            Ok(again) if again == *out => {}
            other => problems.push(format!(
                "ToASCII of {:?} is {:?}, but ToASCII of that is {:?}",
                name, out, other
            )),
        }
    }
    problems
}

fn main() {
    let path = env::args_os().nth(1).unwrap_or_else(|| {
        eprintln!("usage: host-check FILE");
        process::exit(2)
    });
    let text = fs::read_to_string(&path).unwrap_or_else(|err| {
        eprintln!("host-check: cannot read {:?}: {}", path, err);
        process::exit(2)
    });
    let mut failed = false;
    for line in text.lines() {
        let name = line.trim_end_matches('\r');
        if name.is_empty() || name.starts_with('#') {
            continue;
        }
        let problems = check(name);
        if problems.is_empty() {
            println!("ok: {:?}", name);
        }
        for problem in problems {
            failed = true;
            eprintln!("host-check: {}", problem);
        }
    }
    process::exit(if failed { 1 } else { 0 });
}
