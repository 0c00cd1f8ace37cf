"""How a failure becomes a result: an exception as one short line of text, and ContextLost, the one
failure that ends a run (the CUDA context is gone; context_alive tells)."""

from __future__ import annotations

import torch


class ContextLost(RuntimeError):
    """The CUDA context is unusable (a sticky error): nothing more can run in this process."""


def short_error(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def context_alive(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        torch.zeros(1, device=device).add_(1).item()
        return True
    except Exception:  # noqa: BLE001
        return False
