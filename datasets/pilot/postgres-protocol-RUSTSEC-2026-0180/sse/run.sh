#!/bin/bash
# run.sh POC: decode the PoC file as a binary hstore value with the driver
# built by build.sh. Exit 0 when the decoder returns (entries or an error);
# non-zero when it panics (status 101) or the driver fails.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
rc=0
target/debug/hstore-decode "$poc" || rc=$?
case $rc in
  0) echo "run.sh: decoder returned normally"; exit 0 ;;
  *) echo "run.sh: decoder panicked or failed (exit $rc)" >&2; exit "$rc" ;;
esac
