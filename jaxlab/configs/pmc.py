r"""PMC unlearning miniatures (paper B): lottery machine + tiny-LM TOFU-like.

    python -m jaxlab.main --config=jaxlab/configs/pmc.py --workdir=workdirs/pmc
    python -m jaxlab.main --config=jaxlab/configs/pmc.py:table --workdir=workdirs/pmc_table
    python -m jaxlab.main --config=jaxlab/configs/pmc.py:tiny --workdir=/tmp/pmc

    python -m jaxlab.main --config=jaxlab/configs/pmc.py:spec --workdir=/tmp/pmc_spec

The default preset is the full miniature (3 seeds, 7 methods, 40 people);
`spec` is the spec's size (200 people, 10 % forgotten, 3 seeds; table id
`unlearning_spec`); `table` (10 people, 2 forgotten, shorter training; ~15
min on 2 shared CPU cores) is the first docs table; `small` is in between;
`tiny` is the colab's version; `tiny,smoke` the colab test's (seconds of
plumbing: PMC alone, a few steps, short generations; not a result).
Unlearning lr/steps are [inferred] for a tiny model (the spec's lr 1e-5 is
for a 1.3B model); every method gets the same lr, steps, warm-up and lam.
Spec defaults kept in the default preset: warm-up of one epoch over the
forget set (`unlearn.warmup_epochs`), 200-token generations
(`unlearn.max_new_tokens`, `ref_max_new_tokens`, `eval.max_new_tokens`);
smaller presets shrink them.

`paper`: Llama-3.2-3B-Instruct from `init_from`
(`meta-llama/Llama-3.2-3B-Instruct`) on TOFU as released
(`data.path=locuslab/TOFU`, `data.subset=forget10`, whose retain split
`retain90` follows; `question`, `answer`), with the spec's Llama settings
(lambda 1.25, T 0.9, 20 samples, 30 epochs). `short`: the same run with
its budget cut (`jaxlab.configs._scale.short`). With `data.source="hf"` the
experiment reads TOFU's forget / retain / paraphrased / world-facts /
real-authors subsets (and TOFU's `*_perturbed` tasks for its own metrics,
`config.tofu`) and loads the model and tokenizer from `init_from`:

    python -m jaxlab.main --config=jaxlab/configs/pmc.py:paper,short \
      --config.init_from=smollm2-135m-instruct \
      --config.data.path=/data/TOFU --config.data.subset=forget10 \
      --workdir=/tmp/pmc_tofu

`smollm2`: the paper's claim decided on a real model on 2 CPU cores, as
TOFU does it with the project's own fictitious authors
(`jaxlab.data.synthetic.tofu_authors`: 20 people, 4 facts each, 10 %
forgotten, in TOFU's released files): SmolLM2-135M-Instruct is fine-tuned
on all of them (`full`, every weight) with the `finetune` config, then the
TOFU path above unlearns `forget10` from that checkpoint with PMC, GA, GD
and NPO, 3 seeds, with PMC's Phi-1.5 settings (lambda 1.5, T 1.25, 5
samples, warm-up one epoch) and [inferred] budgets sized to the machine
(`SMOLLM2`: epochs over the 8 forget questions, lr, 32-token answers):

    python -m jaxlab.data.synthetic.tofu_authors /tmp/tofu_authors
    python -m jaxlab.main --workdir=/tmp/ft_tofu \
      --config=finetune:init_from=smollm2-135m-instruct,data=/tmp/tofu_authors/finetune.jsonl,export_dir=/tmp/smollm2_tofu,steps=100,seq_len=64
    python -m jaxlab.main --config=pmc:smollm2 \
      --config.init_from=/tmp/smollm2_tofu \
      --config.data.path=/tmp/tofu_authors --workdir=/tmp/pmc_smollm2
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale


# Paper scale (spec B): Llama-3.2-3B-Instruct on TOFU, batch 8 x grad-accum
# 2, generation max_length 200 (PMC samples the model's own answers, then
# trains on them); TOFU question + answer within 512 tokens [inferred].
PAPER = dict(shape="llama3_2_3b", topology="v5e:2x4", seq_len=512,
             batch_size=16, grad_accum=2, sampler=(8, 128, 200),
             paper="spec B: Llama-3.2-3B-Instruct, batch 8x2, "
             "generation 200 tokens")

# The smollm2 preset's unlearning budget on 2 CPU cores [inferred: PMC's
# lr 1e-5 over 40 epochs of 400 questions is 250 steps; 8 questions make an
# epoch one step, so fewer epochs at a larger lr; a TOFU chat row of
# SmolLM2's template is at most 51 tokens, so 64 fit question + answer].
SMOLLM2 = dict(epochs=10, batch_size=8, lr=1e-4, max_new_tokens=32,
               max_len=64)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False,
                          small=False, table=False,
                          spec=False, fit=False, short=False, smoke=False,
                          smollm2=False)
  tiny, small, table, spec = args.tiny, args.small, args.table, args.spec
  fit = args.fit
  c = common.base_config()
  c.experiment = "pmc"
  c.parts = "lottery,unlearn"
  c.seeds = (0, 1, 2)
  c.methods = "pmc,ga,gd,npo,simnpo,idk,dpo"
  c.table_id = "unlearning"  # the results table's id (docs markers)
  c.table_caption = "Tiny-LM TOFU-like unlearning"
  # Utility's third term (spec B.10): "who wrote <book>" QA, trained with the
  # rest (jaxlab.data.synthetic.real_authors), never unlearned.
  c.num_real_authors = 20
  c.idk_answer = "I don't know."
  c.lottery = dict(num_colours=10, retain_colours=7, balls=100,
                   retain_balls=100, rounds=1500, seeds=(0, 1, 2))
  # jaxlab.data.synthetic.facts.make_fact_set(**c.facts)
  c.facts = dict(num_people=40, forget_frac=0.1, num_world=20, seed=0)
  c.model.update(dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 mlp_dim=192)
  c.pretrain = dict(steps=1500, batch_size=32, lr=3e-3, warmup_steps=50,
                    max_len=96)
  c.unlearn = dict(lam=1.5, beta=0.1, simnpo_beta=2.5, gamma=0.0,
                   num_samples=5, temperature=1.2, top_p=0.95, bt_tau=0.0,
                   max_new_tokens=200, batch_size=8, max_len=96, steps=40,
                   lr=5e-4, weight_decay=0.01, warmup_steps=0,
                   warmup_epochs=1.0, sample_batch_size=64, min_len=0,
                   ref_max_new_tokens=200)
  c.eval = dict(max_new_tokens=200, leak_samples=8, leak_temperature=1.0,
                prefill_modes="answer_prefix,fixed", prefix_words=3,
                fixed_prefill="The answer is: ", retain_limit=80)
  # jaxlab.evals.unlearning: MC least-likely-option attack (K options, score
  # = mean token log-lik [inferred]) and drift; max_len of scored rows.
  c.probes = dict(mc_options=4, mc_normalize="mean", max_len=96)
  if small:  # the CPU-budget table of docs/papers/pmc_mathfimer.md
    c.facts.update(num_people=20)
    c.pretrain.update(steps=600)
    c.unlearn.update(steps=30)
    c.eval.update(leak_samples=4, retain_limit=40)
  if spec:  # spec B miniature size: 200 people, 10 % forget
    c.parts = "unlearn"
    c.table_id = "unlearning_spec"
    c.table_caption = ("Tiny-LM TOFU-like unlearning at the spec's size "
                       "(200 people, 10 % forgotten)")
    c.facts.update(num_people=200, forget_frac=0.1, num_world=20)
    # Spec model size (2 layers, d = 128); enough steps to memorise ~840
    # QA pairs; 6 epochs over the 80 forget QA (1 of warm-up) [inferred:
    # the spec's 40 epochs do not fit a 2-core CPU budget]. Measured on the
    # 2-core machine at load 6-12: ~35 min of pre-training per seed, then
    # 2-7 min per method (at load ~16 a step took 4.4 s, i.e. ~3 h); run
    # one seed per workdir with `--config.seeds=(N,)` and merge with
    # `jaxlab.experiments.report --add`. The pre-trained model and each method's
    # result are cached in the workdir (a killed run resumes; another
    # `unlearn` budget reuses the pre-trained model).
    c.model.update(dim=128, num_layers=2, num_heads=4, num_kv_heads=2,
                   mlp_dim=384)
    c.pretrain.update(steps=2500, batch_size=32, lr=2e-3, warmup_steps=100)
    c.unlearn.update(steps=60)
    c.eval.update(leak_samples=4, retain_limit=80)
  if fit:  # spec's 10 % forget at the largest size that fit the session's
    # loaded 2-core machine (20 people; spec-size run: the `spec` preset)
    c.parts = "unlearn"
    c.table_id = "unlearning_10pct"
    c.table_caption = ("Tiny-LM TOFU-like unlearning, 10 % of 20 people "
                       "forgotten")
    # PMC and the baselines whose comparisons the text claims (GA and NPO
    # drift / MC attack, DPO utility); `--config.methods` adds the others.
    c.methods = "pmc,ga,npo,dpo"
    c.facts.update(num_people=20, forget_frac=0.1, num_world=10)
    c.num_real_authors = 10
    c.pretrain.update(steps=300, lr=3e-3)
    c.unlearn.update(steps=30, lr=1e-3, num_samples=5, temperature=1.2,
                     max_new_tokens=48, ref_max_new_tokens=48)
    c.eval.update(max_new_tokens=48, leak_samples=2, retain_limit=24)
    c.probes.update(max_len=96)
  if table:  # the measured docs table: ~15 min on 2 shared CPU cores
    c.lottery.update(rounds=1500)
    c.facts.update(num_people=10, forget_frac=0.2, num_world=10)
    c.pretrain.update(steps=300)
    c.unlearn.update(steps=40, lr=1e-3, num_samples=6, temperature=1.5,
                     max_new_tokens=40, ref_max_new_tokens=40,
                     warmup_epochs=None)
    c.eval.update(max_new_tokens=40, leak_samples=4, retain_limit=32)
  if tiny:
    # ~1.5 min on 2 CPU cores. The default model (d = 64, 2 layers) and 400
    # pre-training steps memorise the 10 people (loss ~4e-4, forget recall
    # ~97 % before unlearning), and 48-token answers fit the generations, so
    # the table shows what unlearning changes; at 30 steps with d = 32,
    # 1 layer and 16 tokens nothing was learnt and every cell was 0.
    c.seeds = (0,)
    c.lottery.update(rounds=100, seeds=(0,))
    c.facts.update(num_people=10, num_world=5)
    c.pretrain.update(steps=400, batch_size=16, warmup_steps=5)
    c.num_real_authors = 4
    c.unlearn.update(steps=3, num_samples=2, max_new_tokens=48,
                     ref_max_new_tokens=48, batch_size=4)
    c.eval.update(max_new_tokens=48, leak_samples=2, retain_limit=8)
    c.probes.update(max_len=64)
  if args.smoke:  # seconds-long plumbing check (colab test); not a result
    c.seeds = (0,)
    c.methods = "pmc"
    c.lottery.update(rounds=10, seeds=(0,))
    c.pretrain.update(steps=10, batch_size=8, warmup_steps=2)
    c.unlearn.update(steps=1, num_samples=2, max_new_tokens=8,
                     ref_max_new_tokens=8, batch_size=4)
    c.eval.update(max_new_tokens=8, leak_samples=1, retain_limit=4)
  if args.paper or args.smollm2:
    if args.paper:
      scale.preset(c, PAPER)
    scale.paper_run(c, init_from=("" if args.smollm2 else
                                  "meta-llama/Llama-3.2-3B-Instruct"),
                    path="" if args.smollm2 else "locuslab/TOFU",
                    subset="forget10", split="train", eval_split="")
    c.parts = "unlearn"
    # Spec B.8, the Llama-3.2-3B-Instruct column.
    c.unlearn.update(lam=1.25, temperature=0.9, top_p=0.95, num_samples=20,
                     batch_size=8, lr=1e-5, weight_decay=0.01,
                     max_new_tokens=200, ref_max_new_tokens=200,
                     warmup_epochs=1.0,
                     # 30 epochs x 400 forget questions / (8 x 2) per step
                     steps=750,
                     # PMC's max_length of an encoded question + answer
                     max_len=200)
    # jaxlab.experiments.pmc.run_unlearning_tofu: PMC's Llama prompt (chat
    # template, system prompt, date), its Phi-1.5 tags for a checkpoint
    # without a chat template; TOFU's own metrics on its first 300 rows per
    # task (ds_size); forget quality needs a retain-only checkpoint
    # (`--config.tofu.retain_from=`, e.g. TOFU's released retain90 model).
    c.tofu = dict(system_prompt="You are a helpful assistant.",
                  date_string="10 Apr 2025", question_start_tag="Question: ",
                  question_end_tag="\n", answer_tag="Answer: ",
                  use_chat_template=True, tofu_metrics=True, eval_size=300,
                  retain_from="")
    c.table_id = "unlearning_tofu"
    c.table_caption = "PMC and baselines on TOFU"
  if args.smollm2:
    b = SMOLLM2
    c.seeds = (0, 1, 2)
    c.methods = "pmc,ga,gd,npo"
    # Spec B.8, the Phi-1.5 column (the smaller model), lr and epochs cut.
    c.unlearn.update(lam=1.5, temperature=1.25, top_p=0.95, num_samples=5,
                     batch_size=b["batch_size"], lr=b["lr"],
                     # 8 forget questions, batch 8: one step an epoch
                     steps=b["epochs"], warmup_epochs=1.0,
                     max_new_tokens=b["max_new_tokens"],
                     ref_max_new_tokens=b["max_new_tokens"],
                     max_len=b["max_len"])
    c.eval.update(max_new_tokens=b["max_new_tokens"])
    c.table_id = "unlearning_smollm2"
    c.table_caption = ("PMC and baselines on SmolLM2-135M-Instruct "
                       "fine-tuned on TOFU-format fictitious authors")
  if args.short:
    scale.short(c, {"lottery.rounds": 10})
  return c
