#!/bin/bash
# run.sh POC: convert each host name in the PoC file to ASCII and to Unicode
# with the host-check driver built by build.sh. Exit 0 when every name has
# one ASCII form (an ASCII name is refused or converted to itself); non-zero
# when a conversion maps a name to a different one (status 1) or the driver
# fails.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
rc=0
target/debug/host-check "$poc" || rc=$?
case $rc in
  0) echo "run.sh: every host name kept a single ASCII form"; exit 0 ;;
  *) echo "run.sh: a host name was converted into a different name, or the driver failed (exit $rc)" >&2; exit "$rc" ;;
esac
