//! ext-new FILE: build the X.509 extension that FILE describes, as a
//! certificate-issuing service does from a request or a profile: the first
//! line is the extension's short name (or `nid:N` for a numeric NID), the
//! second its value in OpenSSL's configuration syntax (may be empty). No
//! configuration database and no issuer context are given, so
//! `X509Extension::new(None, None, ..)` / `new_nid(None, None, ..)` is called.
//!
//! Exit status: 0 when the call returns (the extension or an error), 2 on a
//! usage or I/O error; a crash in the library ends the process with a signal
//! (SIGSEGV: shell status 139).
use std::{env, fs, process};

use openssl::nid::Nid;
use openssl::x509::X509Extension;

fn main() {
    let path = match env::args_os().nth(1) {
        Some(path) => path,
        None => {
            eprintln!("usage: ext-new FILE");
            process::exit(2);
        }
    };
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) => {
            eprintln!("ext-new: cannot read {:?}: {}", path, err);
            process::exit(2);
        }
    };
    let mut lines = text.lines();
    let name = lines.next().unwrap_or("").trim().to_string();
    let value = lines.next().unwrap_or("").trim_end_matches('\r').to_string();
    let made = match name.strip_prefix("nid:") {
        Some(num) => match num.parse::<i32>() {
            Ok(raw) => X509Extension::new_nid(None, None, Nid::from_raw(raw), &value),
            Err(_) => {
                eprintln!("ext-new: bad NID {:?}", num);
                process::exit(2);
            }
        },
        None => X509Extension::new(None, None, &name, &value),
    };
    match made {
        Ok(_) => println!("built extension {} = {:?}", name, value),
        Err(err) => println!("rejected: {}", err),
    }
}
