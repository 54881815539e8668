#!/bin/bash
# Build the tracing-subscriber crate and the log-check driver from
# /ssebench/harness against it (offline, see .cargo/config.toml in the tree).
set -euo pipefail
cargo build --offline
drv=target/ssebench-driver
rm -rf "$drv"
mkdir -p "$drv"
cp -r /ssebench/harness/log-check/. "$drv/"
cargo build --offline --manifest-path "$drv/Cargo.toml" --target-dir target
test -x target/debug/log-check
