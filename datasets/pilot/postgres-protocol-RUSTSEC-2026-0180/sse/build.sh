#!/bin/bash
# Build the postgres-protocol crate and the hstore-decode driver from
# /ssebench/harness against it. Dependencies come from Debian's crate
# registry (offline, see .cargo/config.toml in the tree).
set -euo pipefail
cargo build --offline
drv=target/ssebench-driver
rm -rf "$drv"
mkdir -p "$drv"
cp -r /ssebench/harness/hstore-decode/. "$drv/"
cargo build --offline --manifest-path "$drv/Cargo.toml" --target-dir target
test -x target/debug/hstore-decode
