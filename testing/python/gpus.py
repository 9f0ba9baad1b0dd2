"""What the GPU tests need to know about the machine's GPU."""


def has_sm90() -> bool:
    """Whether torch sees a CUDA GPU of compute capability 9.x or newer (TMA, WGMMA)."""
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    except Exception:
        return False
