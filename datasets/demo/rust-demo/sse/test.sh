#!/bin/bash
# Build, then run pakfile's unit tests.
set -euo pipefail
/ssebench/scripts/build.sh
cargo test --offline
