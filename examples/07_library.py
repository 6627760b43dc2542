"""The training search from Python: one frozen request in, a result object out.

Run: python examples/07_library.py
"""

from autotune.inputs.request import TrainingRequest
from autotune.search.api import SearchSettings, TrainingSearch, search_training

inputs = TrainingRequest(model="llama3-8b", hardware="h100-sxm5-80gb", gpus=16, seq_len=8192,
                         global_batch=128).build()
outcome = search_training(TrainingSearch(inputs=inputs, settings=SearchSettings(top=3)))
for ranked in outcome.result.ranked:
    estimate = ranked.estimate
    print(f"{ranked.rank}. {ranked.plan.as_string()}: {estimate['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
          f"{estimate['memory_gib_per_gpu']:.1f} GiB/GPU")
document = outcome.to_json()  # what `autotune search --json` prints
print(f"{document['search']['evaluations']:,} plans evaluated by {document['search']['sampler']} search")
