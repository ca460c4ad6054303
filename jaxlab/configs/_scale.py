"""Paper-scale presets (`--config=NAME:paper`): the papers' own model shapes, lengths and batches.

A config's `paper` preset (`--config=rope_extension:paper`) calls `apply`
with the paper's model (a name of `SHAPES`), sequence length, batch and the
TPU topology it fits on. `apply` sets `config.model` to that architecture
(bf16 compute over fp32 master weights, scanned layers, full remat: the
TPU defaults MaxText uses), `config.train` to the paper's batch and length,
`config.mesh` to FSDP over every chip, the vocabulary-chunked loss, and
`config.scale` to what `python -m experiments.compile` reads when no
`--topology` is given:

    python -m experiments.compile --config=rope_extension:paper
    python -m jaxlab.experiments.bench.tpu_presets      # every paper preset

`config.scale.program` says which program stands for the paper's cost:
"train" (the step that trains the model: SFT, unlearning, the reranker's
fine-tuning, GRPO's learner update) and, when `sampler` is given, the
sampler's prefill and decode at the rollout / evaluation batch. For the
vision-language papers (A, F, G, R, S) the shape is Qwen2.5-VL's language
model; its 0.67B-parameter vision tower is not in the compiled program
(`config.scale.note` says so), so the figures are a lower bound for them.
The weights are never materialised: on a CPU host the preset is for
compiling, on a TPU VM it is the run itself (for the experiments whose
model is `config.model`).

Shapes are the released checkpoints' `config.json` values (Hugging Face
model cards of each model; vocabulary sizes as shipped, padded ones kept).
"""

from __future__ import annotations

from typing import Any

import ml_collections

# name -> DecoderConfig fields (jaxlab.models.decoder), from each released
# checkpoint's config.json.
SHAPES: dict[str, dict[str, Any]] = {
    # meta-llama/Llama-3.2-1B(-Instruct)
    "llama3_2_1b": dict(vocab_size=128256, dim=2048, num_layers=16,
                        num_heads=32, num_kv_heads=8, mlp_dim=8192,
                        rope_theta=500000.0, tie_embeddings=True,
                        max_position_embeddings=131072),
    # meta-llama/Llama-3.2-3B(-Instruct)
    "llama3_2_3b": dict(vocab_size=128256, dim=3072, num_layers=28,
                        num_heads=24, num_kv_heads=8, mlp_dim=8192,
                        rope_theta=500000.0, tie_embeddings=True,
                        max_position_embeddings=131072),
    # meta-llama/Meta-Llama-3-8B / Llama-3.1-8B(-Instruct)
    "llama3_8b": dict(vocab_size=128256, dim=4096, num_layers=32,
                      num_heads=32, num_kv_heads=8, mlp_dim=14336,
                      rope_theta=500000.0, max_position_embeddings=131072),
    # meta-llama/Llama-2-7b-hf
    "llama2_7b": dict(vocab_size=32000, dim=4096, num_layers=32, num_heads=32,
                      num_kv_heads=32, mlp_dim=11008, rope_theta=10000.0,
                      max_position_embeddings=4096),
    # meta-llama/Llama-2-13b-hf
    "llama2_13b": dict(vocab_size=32000, dim=5120, num_layers=40,
                       num_heads=40, num_kv_heads=40, mlp_dim=13824,
                       rope_theta=10000.0, max_position_embeddings=4096),
    # Qwen/Qwen2.5-0.5B(-Instruct)
    "qwen2_5_0_5b": dict(vocab_size=151936, dim=896, num_layers=24,
                         num_heads=14, num_kv_heads=2, mlp_dim=4864,
                         qkv_bias=True, tie_embeddings=True,
                         rope_theta=1000000.0, max_position_embeddings=32768),
    # Qwen/Qwen2.5-3B(-Instruct); Qwen2.5-VL-3B's language model
    "qwen2_5_3b": dict(vocab_size=151936, dim=2048, num_layers=36,
                       num_heads=16, num_kv_heads=2, mlp_dim=11008,
                       qkv_bias=True, tie_embeddings=True,
                       rope_theta=1000000.0, max_position_embeddings=32768),
    # Qwen/Qwen2.5-7B(-Instruct), Qwen2.5-Math-7B (theta 1e4, 4k), and
    # Qwen2.5-VL-7B's language model
    "qwen2_5_7b": dict(vocab_size=152064, dim=3584, num_layers=28,
                       num_heads=28, num_kv_heads=4, mlp_dim=18944,
                       qkv_bias=True, rope_theta=1000000.0,
                       max_position_embeddings=32768),
    # Qwen/Qwen2.5-14B(-Instruct)
    "qwen2_5_14b": dict(vocab_size=152064, dim=5120, num_layers=48,
                        num_heads=40, num_kv_heads=8, mlp_dim=13824,
                        qkv_bias=True, rope_theta=1000000.0,
                        max_position_embeddings=32768),
    # Qwen/Qwen3-8B
    "qwen3_8b": dict(vocab_size=151936, dim=4096, num_layers=36, num_heads=32,
                     num_kv_heads=8, head_dim=128, mlp_dim=12288,
                     qk_norm=True, rope_theta=1000000.0,
                     max_position_embeddings=40960),
    # Qwen/Qwen3-4B (tied)
    "qwen3_4b": dict(vocab_size=151936, dim=2560, num_layers=36, num_heads=32,
                     num_kv_heads=8, head_dim=128, mlp_dim=9728, qk_norm=True,
                     tie_embeddings=True, rope_theta=1000000.0,
                     max_position_embeddings=40960),
    # GSAI-ML/LLaDA-8B-Instruct (bidirectional masked diffusion; MHA)
    "llada_8b": dict(vocab_size=126464, dim=4096, num_layers=32, num_heads=32,
                     num_kv_heads=32, mlp_dim=12288, rope_theta=500000.0,
                     causal=False, max_position_embeddings=4096),
    # mistralai/Mistral-7B-v0.1 (sliding window 4096)
    "mistral_7b": dict(vocab_size=32000, dim=4096, num_layers=32,
                       num_heads=32, num_kv_heads=8, mlp_dim=14336,
                       rope_theta=10000.0, sliding_window=4096,
                       max_position_embeddings=32768),
}

# Shapes released as vision-language models: only their language model is
# compiled (see the module docstring).
PROGRAMS = ("train", "eval")

VLM_NOTE = ("language model of Qwen2.5-VL-{size}; the vision tower (0.67B "
            "params, a few hundred image tokens per sample) is not in the "
            "compiled program, so memory and FLOPs are lower bounds")


def apply(c: ml_collections.ConfigDict, *, shape: str, topology: str,
          seq_len: int, batch_size: int, paper: str, num_slices: int = 1,
          sampler: tuple[int, int, int] | None = None, grad_accum: int = 1,
          remat: Any = "full", chunk_size: int = 1024, note: str = "",
          program: str = "train", lora_rank: int = 0,
          model_overrides: dict[str, Any] | None = None
          ) -> ml_collections.ConfigDict:
    """Sets `c` to the paper's scale (see the module docstring); returns it.

    Args:
      c: the experiment's config (from `common.base_config()`).
      shape: a key of `SHAPES`.
      topology: the TPU topology the programs are compiled for (libtpu's
        name, e.g. "v5p:2x2x4").
      seq_len, batch_size: the training step's (global) batch.
      paper: where the numbers come from (spec section, table).
      num_slices: slices of `topology` (multi-slice over DCN).
      sampler: (batch, prompt_len, max_new_tokens) of the paper's rollout or
        evaluation decode, compiled too; None: the train step only.
      grad_accum, remat, chunk_size: the step's microbatching, remat policy
        and vocabulary chunk of the loss.
      note: what the compiled program leaves out or stands in for.
      program: "train" (the training step) or "eval" (the forward pass
        alone: a training-free method, an analysis of a pretrained model).
      lora_rank: > 0: the step trains LoRA factors of this rank on every
        linear layer (`config.lora`), the base weights frozen.
      model_overrides: further DecoderConfig fields (e.g. a RoPE scaling).
    """
    if program not in PROGRAMS:
      raise ValueError(f"scale.apply: program={program!r}; valid: "
                       f"{', '.join(PROGRAMS)}")
    if shape not in SHAPES:
      raise ValueError(f"scale.apply: unknown shape {shape!r}; valid: "
                       f"{', '.join(sorted(SHAPES))}")
    fields = dict(SHAPES[shape], **(model_overrides or {}))
    model = ml_collections.ConfigDict({"name": "decoder"})
    for k, v in fields.items():
      model[k] = v
    model.dtype = "bfloat16"
    model.param_dtype = "float32"
    model.remat = remat
    model.scan_layers = True
    c.model = model
    c.train.batch_size = int(batch_size)
    c.train.seq_len = int(seq_len)
    c.optim.grad_accum = int(grad_accum)
    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1
    if "loss" in c:
      c.loss.chunk_size = int(chunk_size)
    c.scale = ml_collections.ConfigDict({
        "shape": shape, "topology": topology, "num_slices": int(num_slices),
        "paper": paper, "note": note, "program": program,
        # The step compiled: next-token CE, or LLaDA's masked-diffusion loss
        # for a bidirectional model (over the LM pipeline's batch layout).
        "loss": "lm" if fields.get("causal", True) else "llada"})
    if lora_rank:
      c.lora.rank = int(lora_rank)
      c.lora.alpha = float(2 * lora_rank)
    if sampler is not None:
      b, p, n = (int(x) for x in sampler)
      c.aot_sampler = ml_collections.ConfigDict(
          {"batch": b, "prompt_len": p, "max_new_tokens": n})
    return c


def preset(c: ml_collections.ConfigDict, spec: dict[str, Any]
           ) -> ml_collections.ConfigDict:
  """`apply(c, **spec)`: a config file's `PAPER` dict as its paper preset."""
  return apply(c, **spec)
