#!/bin/bash
# Build, then run tlvkit's unit tests (under AddressSanitizer).
set -euo pipefail
/ssebench/scripts/build.sh
export ASAN_OPTIONS="detect_leaks=0"
make test \
  CFLAGS="-fsanitize=address -g -O1 -fno-omit-frame-pointer -Wall -Wextra" \
  LDFLAGS="-fsanitize=address"
