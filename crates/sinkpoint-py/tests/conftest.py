"""Shared fixtures. The tests run against the installed package (the wheel .ci/run builds)."""

import os
import random

import pytest


@pytest.fixture
def seed():
    """A seed for a random test, printed so a failure can be replayed (SINKPOINT_PY_SEED)."""
    value = int(os.environ.get("SINKPOINT_PY_SEED", random.randrange(2**32)))
    print(f"seed: {value} (replay with SINKPOINT_PY_SEED={value})")
    return value
