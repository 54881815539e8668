"""Deprecated: the old home of sse.reference.get_reference_patch."""

from __future__ import annotations

import warnings

from sse.reference import get_reference_patch


def get_ground_truth() -> str:
    """Deprecated alias of sse.reference.get_reference_patch; removed in the next release."""
    warnings.warn(
        "sse.cheating.get_ground_truth is deprecated; use sse.reference.get_reference_patch",
        DeprecationWarning,
        stacklevel=2,
    )
    return get_reference_patch()
