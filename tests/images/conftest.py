import pytest


@pytest.fixture(autouse=True)
def _private_index_cache(tmp_path, monkeypatch):
    """Each test gets its own store-index cache (never the user's ~/.cache)."""
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "index-cache"))
