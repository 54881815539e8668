#!/bin/bash
# Build, then run the crate's unit tests and integration tests (formatters,
# filters, layers, the registry) with its default features. Its doctests
# take too long to compile on two cores.
set -euo pipefail
/ssebench/scripts/build.sh
cargo test --offline --lib --tests
