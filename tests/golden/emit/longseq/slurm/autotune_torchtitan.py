# Written by autotune for torchtitan 0.3.0. Edit freely; rerun `autotune emit` to regenerate.
# model: llama3-70b; hardware: h100-sxm5-80gb; 16 node(s) x 8 GPUs = 128 GPUs
# plan: tp=4,pp=1,cp=16,ep=1,vp=1,sp=true,zero=3,mbs=1,recompute=none,precision=bf16,offload=none
# layout: TP4 CP16 DP2 (world size 128 = tp 4 x pp 1 x cp 16 x dp 2)
# batch: global 32 sequences of 131072 tokens = micro-batch 1 x 16 micro-batches x dp 2
# predicted: step 65.980 s, 60.5 GiB per GPU, MFU 46.8%, 497 tokens/s/GPU (autotune's analytic cost model)
# torchtitan config module: launch with `-m torchtitan.train --module autotune_torchtitan --config autotune_plan`
# and this file's folder on PYTHONPATH (torchtitan_launch.sh and the Slurm script do both).
# RoPE is torchtitan's model code (the flavour model_registry builds), which this module does not set: llama3-70b has RoPE theta 500000, no scaling.
# torchtitan's Llama 3 flavours rotate with theta 500000 and Llama 3.1's frequency scaling, unlike llama3-70b: to match it, change config.model_spec's RoPE config (theta, scaling) in autotune_plan().

"""A torchtitan 0.3.0 config for one autotune plan; see the comments above."""

from torchtitan.models.llama3 import model_registry
from torchtitan.models.llama3.config_registry import llama3_70b


def autotune_plan():
    """TP4 CP16 DP2 on 128 GPUs, from torchtitan's llama3_70b."""
    config = llama3_70b()
    config.model_spec = model_registry('70B', converters=None)
    config.training.seq_len = 131072
    config.training.local_batch_size = 1
    config.training.global_batch_size = 32
    config.parallelism.data_parallel_replicate_degree = 1
    config.parallelism.data_parallel_shard_degree = 2
    config.parallelism.fsdp_reshard_after_forward = 'always'
    config.parallelism.tensor_parallel_degree = 4
    config.parallelism.enable_sequence_parallel = True
    config.parallelism.context_parallel_degree = 16
    config.parallelism.expert_parallel_degree = 1
    config.parallelism.pipeline_parallel_degree = 1
    config.compile.enable = True
    config.compile.enable_async_tensor_parallel = True
    config.activation_checkpoint = None
    return config
