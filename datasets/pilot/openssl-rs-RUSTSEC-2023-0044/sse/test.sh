#!/bin/bash
# Build, then run the crate's unit tests (src/**/tests). The certificates in
# test/ expired in August 2026, so the test binary runs under faketime at a
# date inside their validity period.
set -euo pipefail
/ssebench/scripts/build.sh
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="faketime 2024-06-01" \
    cargo test --offline --lib
