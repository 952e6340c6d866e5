"""Model identity: the weights of a PyTorch module fed to a digest."""
from __future__ import annotations


def update_with_weights(digest, module) -> None:
    """Feed every tensor of a PyTorch module's state_dict to `digest`, in state_dict order."""
    for tensor in module.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
