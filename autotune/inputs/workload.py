"""The workload: what runs on the cluster, training (sequence, batch, budget) or serving (request shape and load)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError


# An expert's capacity over its mean share.  Below 1 an expert drops tokens even when the load is perfectly
# balanced: each step skips part of the experts' work, so its time is not the model's, and tokens/s and MFU (which
# count every token's model FLOPs) would pass what the GPUs did (MFU 164% at 0.1).  Above 1000 is beyond any use
# (E/k times the mean already holds every token of the batch).
MIN_CAPACITY_FACTOR = 1.0
MAX_CAPACITY_FACTOR = 1000.0


def capacity_factor_problem(value: float | None) -> str | None:
    """Why ``value`` is not an expert capacity factor (None: it is, or none is given)."""
    if value is None or MIN_CAPACITY_FACTOR <= value <= MAX_CAPACITY_FACTOR:
        return None
    return (f"must be >= {MIN_CAPACITY_FACTOR:g} and <= {MAX_CAPACITY_FACTOR:g} (an expert's token capacity over "
            f"its mean share; 1.0 is the usual, below it every step drops tokens even when balanced; leave it out "
            f"for dropless), but got {value!r}")


# The largest training budget a run may state: about 25 times the largest published so far (Qwen3, 36T tokens,
# arXiv 2505.09388; Llama 3, 15T, arXiv 2407.21783).  Beyond it a budget is a slip of the exponent (15e18 for
# 15e12), which had printed a run of 148 million days and $85 billion as a plan.
MAX_TRAINING_TOKENS = 1e15


def tokens_problem(tokens: float | None, seq_len: int, global_batch: int) -> str | None:
    """Why ``tokens`` is not a training budget for this step size (None: it is, or none is given).  A budget below
    one optimizer step is a typo (1e-320, 15e2 for 15e12): the run would take 0 days and cost $0; one above
    MAX_TRAINING_TOKENS is one too."""
    if tokens is None:
        return None
    if not tokens > 0:
        return f"must be > 0, but got {tokens}"
    if tokens > MAX_TRAINING_TOKENS:
        return (f"must be <= {MAX_TRAINING_TOKENS:g} tokens (about 25 times the largest published training budget; "
                f"check the exponent), but got {tokens:g}")
    step_tokens = seq_len * global_batch
    if tokens < step_tokens:
        return (f"must be at least one step's tokens (sequence length x global batch = {step_tokens:,}), but got "
                f"{tokens:g}")
    return None


@dataclass(frozen=True)
class TrainWorkload:
    """Sequence length and global batch (in sequences); ``tokens`` is the training budget, if known.

    ``moe_imbalance``: tokens the busiest expert-parallel rank receives over the mean (1.0: every rank
    the same share, as force-balanced benchmarks run, e.g. Megatron's --moe-router-force-load-balancing;
    a real router with a balancing loss or bias runs above it).  It scales the expert GEMMs and the
    all-to-all of the slowest rank, which the others wait for.

    ``moe_capacity_factor``: token dropping with padding (Megatron-Core ``--moe-expert-capacity-factor``
    with ``--moe-pad-expert-input-to-capacity``): every expert takes exactly that many times its mean
    share of tokens, the surplus dropped and the rest padded, so the shapes are fixed and the dispatcher
    never waits on the host (its sync point stays ``no_sync``, token_dispatcher.py).  None: dropless.
    """

    seq_len: int
    global_batch: int
    tokens: float | None = None
    moe_imbalance: float = 1.0
    moe_capacity_factor: float | None = None

    def __post_init__(self) -> None:
        if not 1.0 <= self.moe_imbalance < math.inf:
            raise ValueError(f"1 <= moe_imbalance < inf must hold (busiest rank over the mean), but got "
                             f"(moe_imbalance={self.moe_imbalance})")
        problem = capacity_factor_problem(self.moe_capacity_factor)
        if problem:
            raise ValueError(f"moe_capacity_factor {problem}")
        if self.seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, but got (seq_len={self.seq_len})")
        if self.global_batch < 1:
            raise ValueError(f"global_batch must be >= 1, but got (global_batch={self.global_batch})")
        if self.tokens is not None and self.tokens <= 0:
            raise ValueError(f"tokens must be > 0, but got (tokens={self.tokens})")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch

    def moe_expert_load(self, ep):
        """Tokens the busiest expert-parallel rank computes and receives, over the mean share, for plans of ``ep``
        expert-parallel ranks (a number or an array): the capacity factor when tokens are dropped and padded (every
        expert is padded to it, whatever the layout), else the imbalance, which no rank of ``ep`` can exceed
        ``ep`` times the mean of (it would receive every token), so it is capped there; with ``ep`` = 1 every rank
        holds all the experts and receives the mean."""
        if self.moe_capacity_factor is not None:
            return np.full_like(np.asarray(ep, dtype=np.float64), self.moe_capacity_factor)
        return np.minimum(self.moe_imbalance, np.asarray(ep, dtype=np.float64))

    @property
    def moe_host_sync(self) -> bool:
        """Whether the MoE dispatcher waits on the host every block (dropless: shapes known only then)."""
        return self.moe_capacity_factor is None


# The slowest open-loop arrival rate a serving workload may state, requests per second (one request in about 17
# minutes): slower is no load to plan for, and a rate in requests per hour or per day typed as per second is a unit slip.
MIN_REQUEST_RATE = 1e-3
# Latency targets (--ttft-ms, --tpot-ms), in ms: no model's step is shorter than a few kernel launches (each takes
# microseconds on any GPU), so a target below 10 us is a slip (a rate, a number of seconds in the wrong unit) that
# no plan could meet; 1e-308 was searched and every plan reported as missing it.  A target beyond a day binds no
# request and is refused too (leave it out for none).
MIN_LATENCY_TARGET_MS = 0.01
MAX_LATENCY_TARGET_MS = 86_400_000.0


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
        for name, flag in (("ttft_ms", "--ttft-ms"), ("tpot_ms", "--tpot-ms")):
            value = getattr(self, name)
            if value is not None and not MIN_LATENCY_TARGET_MS <= value <= MAX_LATENCY_TARGET_MS:
                raise InputError(f"{MIN_LATENCY_TARGET_MS:g} <= {flag} <= {MAX_LATENCY_TARGET_MS:,.0f} ms must hold "
                                 f"(10 microseconds, a few kernel launches, to a day), but got ({flag}={value:g}); give "
                                 f"the target in milliseconds, or leave {flag} out for none", field=flag)
        if self.request_rate is not None and self.request_rate < MIN_REQUEST_RATE:
            raise InputError(f"must be at least {MIN_REQUEST_RATE:g} requests per second (one in about 17 minutes), but "
                             f"got {self.request_rate!r}; give the rate per second (e.g. 2 requests per minute is "
                             "--request-rate 0.033)", field="--request-rate")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError(f"must be >= 1, but got {self.concurrency}", field="--concurrency")
        if self.tpot_ms is not None and self.output_len == 1:
            # one output token has no time between tokens (benchmarks leave such requests out of TPOT)
            raise InputError(f"a TPOT target needs requests that decode, but got (output_len=1, tpot_ms={self.tpot_ms:g}); "
                             "give --output-len 2 or more, or drop --tpot-ms", field="--tpot-ms")
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
    def load_text(self) -> str:
        """The load in words, as the search's header and the launch files' predictions say it."""
        return {"max-throughput": "maximum throughput (all requests queued)",
                "concurrency": f"{self.concurrency} concurrent users",
                "rate": f"{self.request_rate or 0:g} requests/s"}[self.mode]

    @property
    def has_targets(self) -> bool:
        """Whether a plan has anything to meet: a TTFT or TPOT target, or a request rate to keep up with."""
        return bool(self.ttft_ms or self.tpot_ms or self.request_rate is not None)

    @property
    def max_len(self) -> int:
        return self.input_len + self.output_len
