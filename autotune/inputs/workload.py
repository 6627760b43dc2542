"""The workload: what runs on the cluster, training (sequence, batch, budget) or serving (request shape and load)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class TrainWorkload:
    """Sequence length and global batch (in sequences); ``tokens`` is the training budget, if known.

    ``moe_imbalance``: tokens the busiest expert-parallel rank receives over the mean (1.0: every rank
    the same share, as force-balanced benchmarks run, e.g. Megatron's --moe-router-force-load-balancing;
    a real router with a balancing loss or bias runs above it).  It scales the expert GEMMs and the
    all-to-all of the slowest rank, which the others wait for.
    """

    seq_len: int
    global_batch: int
    tokens: float | None = None
    moe_imbalance: float = 1.0

    def __post_init__(self) -> None:
        if not self.moe_imbalance >= 1.0:
            raise ValueError(f"moe_imbalance must be >= 1 (busiest rank over the mean), but got "
                             f"(moe_imbalance={self.moe_imbalance})")
        if self.seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, but got (seq_len={self.seq_len})")
        if self.global_batch < 1:
            raise ValueError(f"global_batch must be >= 1, but got (global_batch={self.global_batch})")
        if self.tokens is not None and self.tokens <= 0:
            raise ValueError(f"tokens must be > 0, but got (tokens={self.tokens})")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


@dataclass(frozen=True)
class ServeWorkload:
    """Request shape and load: fixed input and output lengths; targets and load are optional.

    ``concurrency`` is the number of users in flight over the whole deployment (closed loop);
    ``request_rate`` requests per second (open loop). With neither: maximum throughput
    (every request queued at once; the engine fills its batch).
    """

    input_len: int
    output_len: int
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    concurrency: int | None = None
    request_rate: float | None = None

    def __post_init__(self) -> None:
        checks = (("input_len", self.input_len, "--input-len"), ("output_len", self.output_len, "--output-len"))
        for _, value, flag in checks:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"must be an integer >= 1, but got {value!r}", field=flag)
        for name, flag in (("ttft_ms", "--ttft-ms"), ("tpot_ms", "--tpot-ms"), ("request_rate", "--request-rate")):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InputError(f"must be > 0, but got {value!r}", field=flag)
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError(f"must be >= 1, but got {self.concurrency}", field="--concurrency")
        if self.concurrency is not None and self.request_rate is not None:
            raise InputError("give the load once: --concurrency C (users in flight) or --request-rate R, not both",
                             field="--concurrency")

    @property
    def mode(self) -> str:
        if self.request_rate is not None:
            return "rate"
        if self.concurrency is not None:
            return "concurrency"
        return "max-throughput"

    @property
    def max_len(self) -> int:
        return self.input_len + self.output_len
