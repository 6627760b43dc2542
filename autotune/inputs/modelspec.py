"""Model specs (the *application* architecture): bundled YAML, a YAML path, or an HF config.json."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, check_keys
from . import loading
from .resources import bundled_names, read_named

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("rope", "learned", "alibi", "none")
# Beyond these a spec is a typo: the space enumerates pipeline splits per layer, and sizes this large overflow.
MAX_LAYERS = 100_000
MAX_SIZE = 10**8


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts shape. Layers ``first_dense_layers, +layer_interval, ...`` are MoE."""

    n_experts: int
    top_k: int
    expert_ffn_hidden_size: int
    n_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int = 0  # total width of the shared expert(s)
    layer_interval: int = 1
    first_dense_layers: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k must hold 1 <= top_k <= n_experts, but got (top_k={self.top_k}, n_experts={self.n_experts})")

    def n_moe_layers(self, n_layers: int) -> int:
        if self.first_dense_layers >= n_layers:
            return 0
        return len(range(self.first_dense_layers, n_layers, self.layer_interval))


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. Sizes are per layer; ``head_dim`` is explicit (Qwen3: 128 != h/a)."""

    name: str
    n_layers: int
    hidden_size: int
    ffn_hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    mlp: str = "swiglu"
    tied_embeddings: bool = False
    max_seq_len: int | None = None
    norm: str = "rmsnorm"
    position_embedding: str = "rope"
    dropout: bool = False
    moe: MoESpec | None = None
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name} must be a whole number, but got ({name}={value!r})")
            if value < 1:
                raise ValueError(f"{name} must be >= 1, but got ({name}={value})")
            limit = MAX_LAYERS if name == "n_layers" else MAX_SIZE
            if value > limit:
                raise ValueError(f"{name} must be <= {limit:,}, but got ({name}={value})")
        if self.moe is not None and self.moe.n_experts > MAX_SIZE:
            raise ValueError(f"moe.n_experts must be <= {MAX_SIZE:,}, but got (n_experts={self.moe.n_experts})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads must be a multiple of n_kv_heads, but got (n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads})")
        if self.mlp not in MLP_KINDS:
            raise ValueError(f"mlp must be one of {MLP_KINDS}, but got (mlp={self.mlp!r})")

    # --- derived sizes -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP: 2 for GeLU (up, down), 3 for SwiGLU (gate, up, down)."""
        return 3 if self.mlp == "swiglu" else 2

    @property
    def n_moe_layers(self) -> int:
        return self.moe.n_moe_layers(self.n_layers) if self.moe else 0

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        return h * (self.q_width + 2 * self.kv_width) + self.q_width * h

    @property
    def dense_mlp_params_per_layer(self) -> int:
        return self.mlp_matrices * self.hidden_size * self.ffn_hidden_size

    @property
    def expert_params_per_moe_layer(self) -> int:
        """Routed experts only (the part that expert parallelism shards)."""
        if not self.moe:
            return 0
        return self.moe.n_experts * self.mlp_matrices * self.hidden_size * self.moe.expert_ffn_hidden_size

    @property
    def shared_params_per_moe_layer(self) -> int:
        """Router and shared experts of one MoE layer (replicated across EP ranks)."""
        if not self.moe:
            return 0
        h = self.hidden_size
        return h * self.moe.n_experts + self.mlp_matrices * h * self.moe.shared_expert_ffn_hidden_size

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def output_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def n_params(self) -> int:
        layers = self.n_layers * (self.attention_params_per_layer + self.norm_params_per_layer)
        layers += self.n_dense_layers * self.dense_mlp_params_per_layer
        layers += self.n_moe_layers * (self.expert_params_per_moe_layer + self.shared_params_per_moe_layer)
        return layers + self.embedding_params + self.output_params + self.hidden_size

    @property
    def n_active_params(self) -> int:
        """Parameters one token passes through (top-k experts instead of all)."""
        if not self.moe:
            return self.n_params
        inactive = self.expert_params_per_moe_layer * (1 - self.moe.top_k / self.moe.n_experts)
        return int(self.n_params - self.n_moe_layers * inactive)


_TOP_KEYS = frozenset(f.name for f in dataclasses.fields(ModelSpec))
_MOE_KEYS = frozenset(f.name for f in dataclasses.fields(MoESpec))


def model_from_mapping(data: dict, *, source: str) -> ModelSpec:
    check_keys(data, _TOP_KEYS, source=source)
    num = lambda key, **kw: loading.integer(data, key, source=source, **kw)  # noqa: E731
    hidden = num("hidden_size")
    n_heads = num("n_heads")
    head_dim = num("head_dim", default=None)
    if head_dim is None:
        if hidden % n_heads:
            raise InputError(f"hidden_size/n_heads is not whole ({hidden}/{n_heads}); give head_dim explicitly",
                             source=source, field="head_dim")
        head_dim = hidden // n_heads
    moe = None
    moe_raw = data.get("moe")
    if moe_raw is not None:
        if not isinstance(moe_raw, dict):
            raise InputError("must be a mapping (n_experts, top_k, expert_ffn_hidden_size, ...)", source=source, field="moe")
        check_keys(moe_raw, _MOE_KEYS, source=source, section="moe")
        mnum = lambda key, **kw: loading.integer(moe_raw, key, source=source, section="moe", **kw)  # noqa: E731
        try:
            moe = MoESpec(
                n_experts=mnum("n_experts"),
                top_k=mnum("top_k"),
                expert_ffn_hidden_size=mnum("expert_ffn_hidden_size"),
                n_shared_experts=mnum("n_shared_experts", minimum=0, default=0),
                shared_expert_ffn_hidden_size=mnum("shared_expert_ffn_hidden_size", minimum=0, default=0),
                layer_interval=mnum("layer_interval", default=1),
                first_dense_layers=mnum("first_dense_layers", minimum=0, default=0),
            )
        except ValueError as exc:
            raise InputError(str(exc), source=source, field="moe") from None
    n_kv_heads = num("n_kv_heads", default=n_heads)
    n_layers = num("n_layers", maximum=MAX_LAYERS)
    if n_heads % n_kv_heads:
        raise InputError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})", source=source, field="n_kv_heads")
    try:
        return ModelSpec(
            name=loading.text(data, "name", source=source),
            n_layers=n_layers,
            hidden_size=hidden,
            ffn_hidden_size=num("ffn_hidden_size"),
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            vocab_size=num("vocab_size"),
            mlp=loading.text(data, "mlp", source=source, default="swiglu", choices=MLP_KINDS),
            tied_embeddings=loading.boolean(data, "tied_embeddings", source=source, default=False),
            max_seq_len=num("max_seq_len", default=None, maximum=2**62),
            norm=loading.text(data, "norm", source=source, default="rmsnorm", choices=NORM_KINDS),
            position_embedding=loading.text(data, "position_embedding", source=source, default="rope", choices=POSITION_KINDS),
            dropout=loading.boolean(data, "dropout", source=source, default=False),
            moe=moe,
            description=loading.text(data, "description", source=source, default=""),
            source=loading.text(data, "source", source=source, default=""),
        )
    except ValueError as exc:  # the constructor's own checks (sizes in range, heads divide)
        if isinstance(exc, InputError):
            raise
        raise InputError(str(exc), source=source) from None


def model_to_mapping(model: ModelSpec) -> dict:
    """The spec as plain data (what a spec YAML holds, less description and source): ``model_from_mapping`` reads it
    back.  Studies store it in their problem record and ``plans.json`` embeds it, so either is read from anywhere."""
    out = {f.name: getattr(model, f.name) for f in dataclasses.fields(model) if f.name not in ("description", "source")}
    out["moe"] = dataclasses.asdict(model.moe) if model.moe else None
    return out


def model_names() -> list[str]:
    return bundled_names("models")


def load_model(name_or_path: str) -> ModelSpec:
    """A bundled spec by name, a spec YAML by path, or a Hugging Face ``config.json``."""
    path = Path(name_or_path)
    if path.suffix == ".json" or (path.is_dir() and (path / "config.json").exists()):
        from .hf_config import spec_mapping_from_hf

        if path.is_dir():
            path = path / "config.json"
        data = loading.read_mapping(path)
        return model_from_mapping(spec_mapping_from_hf(data, source=str(path)), source=str(path))
    data, source = read_named("models", name_or_path, what="model", field="--model",
                              alternative="or pass a path to a spec YAML or a Hugging Face config.json")
    return model_from_mapping(data, source=source)
