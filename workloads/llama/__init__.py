"""LLaMA-3 workloads: ``train`` (llama_train), ``serve`` (llama_prefill, llama_decode).

``config`` holds the dimensions (book letters) and the real 8B/70B/405B sizes, ``model`` the
architecture and parameter tree (``attention`` its grouped-query attention, fused or by hand),
``sharding`` the partition specs per parallelism, ``memory`` and ``book`` the book's bytes per
device and step model. With E > 0 the MLP is a mixture of experts (``moe``: routing,
dispatch and combine over an ``expert`` mesh axis; ``moe_gmm`` its grouped matmuls,
``moe_step`` the routing a step returns, ``moe_presets`` Mixtral, DeepSeek-V3, LLaMA-4).
"""
