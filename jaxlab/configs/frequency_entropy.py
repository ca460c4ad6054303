r"""Frequency Entropy miniature (paper C): FE maps and an attenuation sweep.

    python -m jaxlab.main --config=jaxlab/configs/frequency_entropy.py \
        --workdir=workdirs/frequency_entropy
    python -m jaxlab.main --config=jaxlab/configs/frequency_entropy.py:tiny \
        --workdir=/tmp/fe

A byte-level decoder whose last layer is NoPE (iRoPE-style control) is
trained on the generated corpus (`data.source=synthetic`), then probed:
SpectrumFE / SequenceFE of post-RoPE query-pair norms per (layer, head,
pair) with the native (half-split) pairing and the non-native adjacent
pairing, heatmaps, and an alpha sweep of weighted RoPE with perplexity for
the spec's selection rules (a, b, c, a+b at the paper's thresholds) and for
equal-size quantile selections (lowest/highest `fraction` of RoPE-layer
pairs, and a random control). Spec C "CPU-only miniature": 4 layers,
d=128, head_dim 32, L=512, F=128, H=64. Args: `tiny` (3 layers, d=64,
L=256, F=64, H=32, 600 steps; about 3-5 minutes on 2 shared CPU cores),
`spec` (spec C's model and length, 4 layers, d=128, head_dim 32, L=512,
F=128, H=64, on a training budget that fits a shared CPU: 300 steps of
batch 4, checkpoint every 50 steps so a stopped run resumes),
`smoke` (seconds; plumbing only, used by the colab test), `steps=N`;
another training seed with `--config.seed=N`.

`smollm2`: the real pretrained model SmolLM2-135M-Instruct (30 layers, 9
query / 3 KV heads of head_dim 64, rope_theta 1e5; `jaxlab.io.pretrained`,
no training, nothing downloads). FE of post-RoPE q and k on the repo's
fixed English corpus (`jaxlab.data.prose`, passages 8-13 as 3 probe
windows of 512 tokens; frame 128, hop 64: 7 frames, as the paper's
4096/1024/512), then next-token top-1 accuracy and NLL on 8 held-out
passages (0-7, 256 tokens each) with the selected query pairs attenuated
by alpha = 0.1 (the paper's downstream setting): the spec's rules a, b, c,
a+b, the 10 % of pairs with the lowest/highest SpectrumFE and SequenceFE,
and as many random pairs (a fresh draw per passage). About 2 minutes of
CPU time (9 minutes wall on 2 heavily shared cores).

`paper`: Llama-3-8B from `init_from` (`meta-llama/Meta-Llama-3-8B`; the
NoPE layers are the checkpoint's, from its config.json: none here, Llama
4's `no_rope_layers` pattern where a config has one) on WikiText-103 as
released (`data.path=Salesforce/wikitext`,
`data.subset=wikitext-103-raw-v1`: FE on `train` text, perplexity on
`test`), then the downstream evaluation: rules a+b attenuated by alpha 0.1
on HellaSwag (`Rowan/hellaswag` validation), TruthfulQA MC1 / MC2
(`truthfulqa/truthful_qa` `multiple_choice`) and MMLU (`cais/mmlu` `all`
test), each choice scored by its log-likelihood as lm-evaluation-harness
does (`--config.downstream.tasks.NAME.path=DIR` for a local copy, `""`
to skip one; `--config.downstream.num_fewshot=5` for the harness's k-shot
contexts). `short`: the same run with its budget cut
(`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common
from jaxlab.data import multiple_choice as mc_data


# Paper scale (spec C): FE of q/k and the attenuation's perplexity on
# Llama-3-8B (also Qwen3-8B, Gemma-2-9B, Llama-4 Scout) over 8k-token
# windows; an analysis of a pretrained model: the forward pass.
PAPER = dict(shape="llama3_8b", topology="v5p:2x2x2", seq_len=8192,
             batch_size=8, program="eval",
             paper="spec C: Llama-3-8B, perplexity with attenuated pairs")

# (name, released layout, subset, split) of the paper's downstream sets;
# the paper preset points each at its Hub id (DOWNSTREAM_PATHS).
DOWNSTREAM_TASKS = (("hellaswag", "hellaswag", "", "validation"),
                    ("truthfulqa_mc1", "truthfulqa_mc1", "multiple_choice",
                     "validation"),
                    ("truthfulqa_mc2", "truthfulqa_mc2", "multiple_choice",
                     "validation"),
                    ("mmlu", "mmlu", "all", "test"))
DOWNSTREAM_PATHS = {"hellaswag": "Rowan/hellaswag",
                    "truthfulqa_mc1": "truthfulqa/truthful_qa",
                    "truthfulqa_mc2": "truthfulqa/truthful_qa",
                    "mmlu": "cais/mmlu"}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, spec=False, smoke=False,
                          smollm2=False, steps=0, short=False)
  c = common.base_config()
  c.experiment = "frequency_entropy"
  c.model.update(dim=128, num_layers=4, num_heads=4, num_kv_heads=2,
                 mlp_dim=384, nope_layers=(3,), max_position_embeddings=512,
                 vocab_size=320)  # bytes + specials, rounded up to 64
  c.data.num_docs = 6000
  c.train.update(steps=1500, batch_size=16, seq_len=512, log_every=100,
                 eval_every=0, eval_batch_size=16, eval_batches=2,
                 checkpoint_every=500, keep_checkpoints=1, tensorboard=False,
                 peak_flops=-1.0)
  c.optim.update(lr=2e-3, warmup_steps=100, weight_decay=0.01)
  c.fe = ml_collections.ConfigDict({
      "frame": 128,
      "hop": 64,
      "window": "hann",          # [inferred] (spec C.2)
      "which": "q",
      "pairings": ("native", "adjacent"),
      "num_eval_seqs": 8,        # sequences of seq_len for FE and perplexity
      "alphas": (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
      "rules": ("a", "b", "c", "a+b"),
      "fraction": 0.1,           # size of the quantile selections
      "mode": "magnitude",       # magnitude (paper) | angle
      "seed": 0,
      "quantiles": ("spectrum_low", "spectrum_high", "sequence_low"),
      "eval_len": 256,           # tokens of each held-out passage
      "probe_len": 512,          # FE signal length L (probe windows)
      "probe_from": 8,           # passages [probe_from:] are the probe text
      "num_probe_seqs": 3,       # probe windows (all 3 that fit at 512)
      "batch_size": 4,           # rows per forward when scoring
  })
  # The paper's downstream evaluation (spec C.6; with `init_from`): the
  # pairs of `rule` attenuated by `alpha` (spec C.4: alpha 0.1 on rules a
  # and b together), each multiple-choice set scored by the log-likelihood
  # of its choices as lm-evaluation-harness does
  # (`jaxlab.evals.multiple_choice`), base vs attenuated model. A task is
  # read from `path` (a Hub id or a local copy laid out as on the Hub;
  # empty = skipped) in its released layout `format`
  # (`jaxlab.data.multiple_choice.FORMATS`), `subset` / `split` as
  # released; `max_rows` (0 = all) caps the questions of each.
  # `num_fewshot` shots precede each question as the harness's
  # `fewshot_context` builds them (`jaxlab.data.multiple_choice.items`):
  # MMLU the first k `dev` rows of the subject, HellaSwag k `train` rows
  # drawn by `random.Random(fewshot_seed)` (the harness's 1234); TruthfulQA
  # stays zero-shot (its yaml's num_fewshot: 0). A task's `fewshot_split`
  # is read whole when k > 0 (`max_rows` caps only the questions).
  c.downstream = ml_collections.ConfigDict({
      "rule": "a+b",
      "alpha": 0.1,
      "max_rows": 0,
      "num_fewshot": 0,
      "fewshot_seed": 1234,
      "tasks": ml_collections.ConfigDict({
          name: ml_collections.ConfigDict({
              "format": fmt, "path": "", "subset": sub, "split": split,
              "fewshot_split": mc_data.FEWSHOT_SPLITS[fmt] or ""})
          for name, fmt, sub, split in DOWNSTREAM_TASKS}),
  })
  if args.spec:  # the default model at a budget 2 shared CPU cores can run
    c.train.update(steps=300, batch_size=4, eval_batch_size=4,
                   checkpoint_every=50, log_every=25)
    c.optim.update(lr=3e-3, warmup_steps=30)
    c.fe.update(alphas=(0.0, 0.1, 0.5, 0.9, 1.0))
  if args.tiny:
    c.model.update(dim=64, num_layers=3, num_heads=2, num_kv_heads=1,
                   mlp_dim=128, nope_layers=(2,), max_position_embeddings=256)
    c.data.num_docs = 6000
    c.train.update(steps=600, batch_size=8, seq_len=256, log_every=100,
                   eval_batch_size=8, checkpoint_every=0)
    c.optim.update(lr=3e-3, warmup_steps=50)
    c.fe.update(frame=64, hop=32, num_eval_seqs=8,
                alphas=(0.0, 0.1, 0.5, 0.9, 1.0))
  if args.smoke:  # seconds-long plumbing check (colab tests); not a result
    c.model.update(dim=32, num_layers=2, num_heads=1, num_kv_heads=1,
                   mlp_dim=64, nope_layers=(1,), max_position_embeddings=128)
    c.data.num_docs = 400  # >= 8 held-out rows of 128 tokens
    c.train.update(steps=5, batch_size=8, seq_len=128, log_every=5,
                   eval_batch_size=8, eval_batches=1, checkpoint_every=0)
    c.fe.update(frame=32, hop=16, num_eval_seqs=2, alphas=(0.1, 1.0))
  if args.smollm2:  # real model, probed and attenuated; nothing is trained
    # fraction 0.025: about the share rule (a) selects in this model (200
    # of 8640 query pairs); rule a+b is rule a here (b selects no pair).
    # With `init_from` (any `jaxlab.io.pretrained` checkpoint) nothing is
    # trained: the model is probed on `jaxlab.data.prose`.
    c.init_from = "smollm2-135m-instruct"
    c.fe.update(frame=128, hop=64,
                alphas=(0.1,), num_eval_seqs=8, seed=0, fraction=0.025,
                rules=("a", "b", "c"), quantiles=(
                    "spectrum_low", "spectrum_high", "sequence_low",
                    "sequence_high"))
  if args.steps:
    c.train.steps = args.steps
  if args.paper:
    scale.preset(c, PAPER)
    # With `init_from` the NoPE layers are the checkpoint's own (its
    # config.json, Llama 4's `no_rope_layers`; none in Llama-3-8B), not
    # `config.model`'s.
    scale.paper_run(c, init_from="meta-llama/Meta-Llama-3-8B",
                    path="Salesforce/wikitext", subset="wikitext-103-raw-v1",
                    split="train", eval_split="test")
    for name, path in DOWNSTREAM_PATHS.items():
      c.downstream.tasks[name].path = path
  if args.short:
    scale.short(c)
  return c
