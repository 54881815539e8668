#!/bin/bash
# run.sh POC: build the X.509 extension the PoC file describes with the
# ext-new driver built by build.sh, without a configuration database or an
# issuer context. Exit 0 when the library returns (the extension or an
# error); non-zero when it crashes (SIGSEGV: shell status 139), panics or
# the driver fails.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
rc=0
target/debug/ext-new "$poc" || rc=$?
case $rc in
  0) echo "run.sh: the library returned normally"; exit 0 ;;
  *) echo "run.sh: ext-new crashed or failed (exit $rc)" >&2; exit "$rc" ;;
esac
