#!/bin/bash
# run.sh POC: verify the tree's test certificate (test/cert.pem, CA
# test/root-ca.pem) for the host name in the PoC file with the certcheck
# driver built by build.sh. Exit 0 when certcheck returns a verdict
# (verified, or a verification failure: status 1); non-zero when it crashes
# (SIGSEGV: shell status 139), panics or fails.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
rc=0
target/debug/certcheck "$poc" test || rc=$?
case $rc in
  0) echo "run.sh: certificate verified"; exit 0 ;;
  1) echo "run.sh: verification failed (graceful)"; exit 0 ;;
  *) echo "run.sh: certcheck crashed or failed (exit $rc)" >&2; exit "$rc" ;;
esac
