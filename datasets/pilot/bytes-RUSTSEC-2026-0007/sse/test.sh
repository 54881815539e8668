#!/bin/bash
# Build, then run the crate's unit and integration tests (Bytes, BytesMut,
# the Buf/BufMut adapters, the allocator tests) and the doctests of
# BytesMut's capacity methods, with integer overflow wrapping as in a
# release build: the checks a debug build adds turn arithmetic slips into
# panics that release builds never see. (All 136 doctests take about five
# minutes on two cores.)
set -euo pipefail
/ssebench/scripts/build.sh
export CARGO_PROFILE_DEV_OVERFLOW_CHECKS=false CARGO_PROFILE_TEST_OVERFLOW_CHECKS=false
cargo test --offline --lib --tests
cargo test --offline --doc -- BytesMut::reserve BytesMut::capacity BytesMut::split
