//! paklist FILE: list the entries of a PAK1 archive.
//! Exit status: 0 ok, 1 invalid input, 64 usage or I/O error.

use std::process::exit;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 2 {
        eprintln!("usage: paklist FILE");
        exit(64);
    }
    let buf = match std::fs::read(&args[1]) {
        Ok(buf) => buf,
        Err(e) => {
            eprintln!("paklist: {}: {}", args[1], e);
            exit(64);
        }
    };
    match pakfile::parse(&buf) {
        Ok(entries) => {
            for e in entries {
                println!("{}\t{} bytes", e.name, e.data.len());
            }
        }
        Err(e) => {
            eprintln!("paklist: invalid input: {}", e);
            exit(1);
        }
    }
}
