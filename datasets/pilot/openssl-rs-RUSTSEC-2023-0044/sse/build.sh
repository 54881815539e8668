#!/bin/bash
# Build the openssl crate and the certcheck driver from /ssebench/harness
# against it. Dependencies come from Debian's crate registry (offline, see
# .cargo/config.toml in the tree); OpenSSL itself is the system libssl.
set -euo pipefail
cargo build --offline
drv=target/ssebench-driver
rm -rf "$drv"
mkdir -p "$drv"
cp -r /ssebench/harness/certcheck/. "$drv/"
cargo build --offline --manifest-path "$drv/Cargo.toml" --target-dir target
test -x target/debug/certcheck
