#!/bin/bash
# Build the openssl crate and the ext-new driver from /ssebench/harness
# against it. Dependencies come from Debian's crate registry (offline, see
# .cargo/config.toml in the tree); OpenSSL itself is the system libssl.
set -euo pipefail
cargo build --offline
drv=target/ssebench-driver
rm -rf "$drv"
mkdir -p "$drv"
cp -r /ssebench/harness/ext-new/. "$drv/"
cargo build --offline --manifest-path "$drv/Cargo.toml" --target-dir target
test -x target/debug/ext-new
