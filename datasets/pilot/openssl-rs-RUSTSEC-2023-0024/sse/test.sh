#!/bin/bash
# Build, then run the crate's unit tests (src/**/tests). The certificates in
# test/ expired in August 2026, so the test binary runs under libfaketime at
# a date inside their validity period. libfaketime is preloaded directly: the
# `faketime` wrapper needs a POSIX semaphore in /dev/shm, which checks, run
# as sse-runner, cannot create (see docs/integrity.md).
set -euo pipefail
/ssebench/scripts/build.sh
export FAKETIME="@2024-06-01 00:00:00"  # read by libfaketime only
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="env LD_PRELOAD=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1" \
    cargo test --offline --lib
