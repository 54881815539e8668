#!/bin/bash
# run.sh POC: feed one PoC file to the paklist built by build.sh.
# Exits 0 when paklist handles the input (lists it, or rejects it as invalid
# with its exit status 1); non-zero when it panics (Rust exits 101) or fails.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
bin="${CARGO_TARGET_DIR:-target}/debug/paklist"
rc=0
RUST_BACKTRACE=1 "$bin" "$poc" || rc=$?
case $rc in
  0) echo "run.sh: input accepted"; exit 0 ;;
  1) echo "run.sh: input rejected gracefully"; exit 0 ;;
  *) echo "run.sh: paklist crashed or failed (exit $rc)" >&2; exit "$rc" ;;
esac
