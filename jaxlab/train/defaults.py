"""The trainer's defaults: every field it reads, as `base_config()`.

They live with the trainer (the library), not with the packaged configs:
`jaxlab.train.runner` and `jaxlab.rl.learner` build sub-trainings from them,
and `jaxlab/configs/common.py` (what a paper config starts from) re-exports
every function here, so `common.base_config()` is this `base_config()`.
"""

import ml_collections

from jaxlab.parallel import mesh as mesh_lib


def mesh_config() -> ml_collections.ConfigDict:
  """Data parallel over all devices by default; -1 fills the rest."""
  return ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})


def sharding_rules() -> tuple:
  """Logical axis name -> mesh axes (see jaxlab/parallel/mesh.py)."""
  return tuple((name, axes) for name, axes in mesh_lib.DEFAULT_RULES)


def optim_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({
      "lr": 3e-4,
      "warmup_steps": 100,
      "schedule": "cosine",   # cosine | linear | constant
      "end_lr_frac": 0.1,
      "b1": 0.9,
      "b2": 0.95,
      "eps": 1e-8,
      "weight_decay": 0.1,    # not applied to norms / biases
      "clip_norm": 1.0,       # global-norm clipping; 0 disables
      "grad_accum": 1,        # micro-batches per optimizer step
      # Parameter groups, each with its own optax transform: name ->
      # {pattern (regex over param paths), lr or lr_mult, optimizer
      # (adamw | sgd | frozen), weight_decay, ...}; see jaxlab/train/optim.py.
      "groups": ml_collections.ConfigDict(),
  })


def train_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({
      "steps": 1000,
      "batch_size": 32,         # global, per optimizer step
      "seq_len": 128,
      "log_every": 10,
      "eval_every": 100,        # 0: only at the end
      "eval_batch_size": 32,
      "eval_batches": 0,        # 0: the whole eval set
      "checkpoint_every": 200,
      "keep_checkpoints": 3,
      "async_checkpoint": True,
      "tensorboard": True,
      "peak_flops": 0.0,        # FLOP/s for MFU; 0: measure a matmul; -1: no MFU
      "debug_step_sleep_s": 0.0,  # slows steps down (preemption tests)
  })


def decoder_config() -> ml_collections.ConfigDict:
  """`config.model` for `name="decoder"`: DecoderConfig fields."""
  return ml_collections.ConfigDict({
      "name": "decoder",
      "vocab_size": 0,          # 0: the tokenizer's vocabulary size
      "dim": 128,
      "num_layers": 2,
      "num_heads": 4,
      "num_kv_heads": 2,
      "mlp_dim": 256,
      "max_position_embeddings": 2048,
      "rope_theta": 10000.0,
      # RoPE scaling (jaxlab.nn.rope): method "default" is plain RoPE; e.g.
      # --config.model.rope_scaling.method=yarn
      # --config.model.rope_scaling.factor=4
      # --config.model.rope_scaling.original_max_position=2048. A config file
      # adds a method's other options (beta_fast, attention_factor, ...);
      # original_max_position 0 means unset.
      "rope_scaling": ml_collections.ConfigDict({
          "method": "default", "factor": 1.0, "original_max_position": 0}),
      "tie_embeddings": False,
      "param_dtype": "float32",
      "dtype": "float32",       # "bfloat16" for bf16 compute
      # Block remat: False/"none" | True/"full" | "minimal" (matmul outputs
      # saved; jaxlab.models.decoder.DecoderConfig); bool or str.
      "remat": ml_collections.FieldReference(False, field_type=object),
      # Stack the blocks and lax.scan over them (compile time flat in depth).
      "scan_layers": False,
      "init_std": 0.02,
  })


def base_config() -> ml_collections.ConfigDict:
  """Every field the generic trainer reads, with defaults."""
  c = ml_collections.ConfigDict()
  c.experiment = "train"
  c.seed = 0
  # The one checkpoint field of every experiment (io.pretrained.load): a
  # shipped name, HF dir, .gguf, jaxlab trainer workdir or Hub id; "" = scratch
  c.init_from = ""
  # Experiment "train": at the end, write the merged model (LoRA folded in)
  # as a HF checkpoint here, with the tokenizer files of data.tokenizer.
  c.export_dir = ""
  c.model = decoder_config()
  c.data = ml_collections.ConfigDict({
      # synthetic | jsonl | chat_jsonl (loss on assistant turns) | tfds |
      # hf (Hugging Face `datasets`: a Hub id or a local copy laid out as on
      # the Hub) | grain (ArrayRecord / Parquet globs) | a registered source
      "source": "synthetic",
      "num_docs": 2000,
      "data_seed": 0,
      # hf: Hub id or local copy; grain: globs; jsonl: a file
      "path": "",
      "subset": "",           # hf: the dataset's config name as released
      "eval_path": "",
      "tfds_name": "",
      "data_dir": "",
      "split": "train",
      "eval_split": "",       # "": hold out eval_fraction of the train rows
      "eval_fraction": 0.05,
      "max_rows": 0,          # rows read from each split (0: all)
      "cache_dir": "",        # hf: the datasets cache ("": its default)
      # hf / grain / tfds rows: auto | text | messages | prompt_completion |
      # question_answer (jaxlab/data/row_formats.py), and their columns
      "format": "auto",
      "text_key": "text",
      "prompt_key": "prompt",
      "completion_key": "completion",
      "question_key": "question",
      "answer_key": "answer",
      "completion_only": True,  # pairs: loss on the completion only
      "chat_template": "auto",  # pairs as a chat: auto | on | off
      # hf / grain / tfds: tokenising worker processes (0: in the trainer's
      # process, `read_threads` threads) and packing bins (0: batch rows)
      "workers": 0,
      "read_threads": 0,
      "pack_bins": 0,
      # batches computed ahead of the step (train and eval iterators), on
      # `read_threads` threads (0: min(prefetch, 4))
      "prefetch": 4,
      # byte | sentencepiece (tokenizer_path: .model) | auto (the init_from
      # checkpoint's own tokenizer.json) | hf (a checkpoint dir at
      # tokenizer_path)
      "tokenizer": "byte",
      "tokenizer_path": "",
      "chat_key": "messages",  # source chat_jsonl: the conversation field
      # Chat-template keywords (template variables such as enable_thinking,
      # tools, documents, chat_template) as a JSON object, e.g.
      # --config.data.chat_template_kwargs='{"enable_thinking": false}'.
      "chat_template_kwargs": "",
      "packing": "pack",      # pack | pad
  })
  c.loss = ml_collections.ConfigDict({"name": "lm"})
  c.optim = optim_config()
  c.train = train_config()
  c.mesh = mesh_config()
  c.sharding_rules = sharding_rules()
  c.lora = ml_collections.ConfigDict({
      "rank": 0,              # 0: full fine-tuning
      "alpha": 16.0,
      "targets": ("q_dnh", "v_dkh"),  # regexes over parameter names
  })
  return c
