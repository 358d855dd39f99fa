import pytest


@pytest.fixture(autouse=True)
def _private_index_cache(tmp_path, monkeypatch):
    """Each test gets its own store-index cache (never the user's ~/.cache)."""
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "index-cache"))


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Tiny problems: one thread avoids OpenMP stalls on a busy shared CI machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
