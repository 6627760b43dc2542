"""The training workload: what is being trained on the cluster (the application's run)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainWorkload:
    """Sequence length and global batch (in sequences); ``tokens`` is the training budget, if known."""

    seq_len: int
    global_batch: int
    tokens: float | None = None

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, but got (seq_len={self.seq_len})")
        if self.global_batch < 1:
            raise ValueError(f"global_batch must be >= 1, but got (global_batch={self.global_batch})")
        if self.tokens is not None and self.tokens <= 0:
            raise ValueError(f"tokens must be > 0, but got (tokens={self.tokens})")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch
