"""The store the core tests tag into, and the record they append (`make_record`, through `store_helpers`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from machine_lsp.core.store import Store


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A store under this test's own `.machine` (MACHINE_HOME), nothing written yet."""
    monkeypatch.setenv("MACHINE_HOME", str(tmp_path / ".machine"))
    return Store.open()
