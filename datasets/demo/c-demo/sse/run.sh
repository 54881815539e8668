#!/bin/bash
# run.sh POC: feed one PoC file to the tlvdump built by build.sh.
# Exits 0 when tlvdump handles the input (prints it, or rejects it as invalid
# with its exit status 1); non-zero when it crashes or ASan reports an error.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
# A distinct exit status for sanitizer reports, so that they never look like
# tlvdump's own "invalid input" status 1.
export ASAN_OPTIONS="exitcode=86:detect_leaks=0:abort_on_error=0"
rc=0
./tlvdump "$poc" || rc=$?
case $rc in
  0) echo "run.sh: input accepted"; exit 0 ;;
  1) echo "run.sh: input rejected gracefully"; exit 0 ;;
  *) echo "run.sh: tlvdump crashed or failed (exit $rc)" >&2; exit "$rc" ;;
esac
