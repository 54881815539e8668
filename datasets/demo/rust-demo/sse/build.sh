#!/bin/bash
# Build pakfile and the paklist CLI (debug profile: overflow checks on).
set -euo pipefail
cargo build --offline
