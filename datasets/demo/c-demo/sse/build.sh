#!/bin/bash
# Build tlvkit (library, tlvdump CLI, unit-test program) with AddressSanitizer
# in the current directory.
set -euo pipefail
make -j2 all \
  CFLAGS="-fsanitize=address -g -O1 -fno-omit-frame-pointer -Wall -Wextra" \
  LDFLAGS="-fsanitize=address"
