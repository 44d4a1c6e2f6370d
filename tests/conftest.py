"""Session set-up for every test directory."""

from __future__ import annotations

import pytest

from tests.integration.harness import own_code_first


def pytest_configure(config: pytest.Config) -> None:
    own_code_first()
