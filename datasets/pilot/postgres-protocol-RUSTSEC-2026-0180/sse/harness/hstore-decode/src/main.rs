//! hstore-decode FILE: decode the bytes of FILE as the binary form of a
//! PostgreSQL `hstore` value (as a server sends it in a DataRow) with
//! `postgres_protocol::types::hstore_from_sql`, and print every entry.
//!
//! Exit status: 0 when decoding returns (entries or an error), 2 on a usage
//! or I/O error; a panic in the decoder exits with Rust's panic status, 101.
use std::{env, fs, process};

use fallible_iterator::FallibleIterator;
use postgres_protocol::types::hstore_from_sql;

fn main() {
    let path = match env::args_os().nth(1) {
        Some(path) => path,
        None => {
            eprintln!("usage: hstore-decode FILE");
            process::exit(2);
        }
    };
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) => {
            eprintln!("hstore-decode: cannot read {:?}: {}", path, err);
            process::exit(2);
        }
    };
    let mut entries = match hstore_from_sql(&bytes) {
        Ok(entries) => entries,
        Err(err) => {
            println!("rejected: {}", err);
            return;
        }
    };
    loop {
        match entries.next() {
            Ok(Some((key, value))) => println!("{:?} => {:?}", key, value),
            Ok(None) => {
                println!("end of value");
                return;
            }
            Err(err) => {
                println!("rejected: {}", err);
                return;
            }
        }
    }
}
