#!/bin/bash
# Build, then run the crate's unit tests (every type's encode/decode, the
# message parsers, SCRAM and password hashing) and its doctests.
set -euo pipefail
/ssebench/scripts/build.sh
cargo test --offline
