"""jaxlab.decoding: inference-time algorithms on the library's models.

* `sampler`: batched KV-cache generation under jit (the one sampler).
* `kv_policies`: what the cache keeps after prefill (full, snapkv, speckv;
  `select_indices`).
* `prompt_compression`: SpecPC, the SpecKV-PC cascade, random / last-N.
* `streaming`: StreamingThinker dual-cache READ/WRITE decoding, arrival clock.
* `diffusion`: masked-diffusion decoding (LLaDA, Fast-dLLM, DPad).
"""
