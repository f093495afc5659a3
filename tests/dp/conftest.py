import pytest
from dp_helpers import make_tiny


@pytest.fixture(params=["mlp", "cnn"])
def tiny(request):
    """(logits_fn, params) of a tiny model: an MLP, and a CNN with every layer kind."""
    return make_tiny(request.param)
