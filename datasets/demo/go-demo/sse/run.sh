#!/bin/bash
# run.sh POC: feed one PoC file to the ./kvdump built by build.sh.
# Exits 0 when kvdump handles the input (prints it, or rejects it as invalid
# with its exit status 1); non-zero when it panics (Go exits 2) or fails.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
rc=0
./kvdump "$poc" || rc=$?
case $rc in
  0) echo "run.sh: input accepted"; exit 0 ;;
  1) echo "run.sh: input rejected gracefully"; exit 0 ;;
  *) echo "run.sh: kvdump crashed or failed (exit $rc)" >&2; exit "$rc" ;;
esac
