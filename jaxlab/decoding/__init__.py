"""jaxlab.decoding: KV-cache sampler (`sampler`) and cache policies
(`kv_policies`)."""
