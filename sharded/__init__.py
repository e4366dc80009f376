"""The local path: per-rank argmax reduced over a TP group (simulated or torch.distributed)."""
