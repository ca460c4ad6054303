r"""Hallucination detection by sampled-answer uncertainty (paper J), miniature.

    python -m jaxlab.main --config=jaxlab/configs/uncertainty.py --workdir=/tmp/unc
    python -m jaxlab.main --config=jaxlab/configs/uncertainty.py:tiny --workdir=/tmp/unc_tiny
    python -m jaxlab.main --config=jaxlab/configs/uncertainty.py:smollm2 --workdir=/tmp/unc_sm

`smollm2`: the shipped SmolLM2-135M-Instruct (`jaxlab.io.pretrained`) asked
the short questions of `jaxlab.data.short_qa` through its chat template;
clusters = the extracted short answer (`short_qa.cluster_key`).

A tiny byte-level LM learns the synthetic facts of
`jaxlab.data.synthetic.facts` for 70 % of the people; the other 30 % are held
out (never trained), so the model confabulates about them. Each question
(known facts, known facts asked with an unseen paraphrase, held-out facts)
gets R = 10 answers sampled at T = 1 and one greedy answer that decides
correctness; every estimator (NE, DSE, SE, SE_R, SE_R+ per lambda, the
additive variant) is scored by AUROC / AURAC over the questions.

The default preset is the docs' miniature (3 seeds, ~10 min per seed on 2
busy shared CPU cores); `tiny` is the colab version and `tiny,smoke` the test's.
The QTN score uses N = 32 (5 qubits) and the first 120 operators, the spec's
CPU setting. Clustering is the CPU stand-in for bidirectional NLI: the
answer's last word (the fact value) compared after normalisation [inferred].

`paper`: Mistral-7B from `init_from` (`mistralai/Mistral-7B-v0.1`) on
TriviaQA as released (`data.path=mandarjoshi/trivia_qa`,
`data.subset=rc.nocontext`: `question`, `answer`; few-shot prompt from
train, questions from validation), R = 10 samples at T = 1. `short`: the
same run with its budget cut (`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common


# Paper scale (spec J): Mistral-7B(-Instruct) answering with R = 10 samples
# at T = 1 plus the greedy answer [spec]; answers of <= 128 tokens after a
# <= 256-token prompt [inferred]; the forward pass scores their likelihood.
PAPER = dict(shape="mistral_7b", topology="v5p:2x2x2", seq_len=384,
             batch_size=88, program="eval", sampler=(88, 256, 128),
             paper="spec J: Mistral-7B, R = 10 samples + greedy")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, smoke=False,
                          smollm2=False, short=False)
  c = common.base_config()
  c.experiment = "uncertainty"
  c.seeds = (0, 1, 2)
  # jaxlab.data.synthetic.facts.make_fact_set(**c.facts, seed=seed); the
  # "forget" split (forget_frac of the people) is the held-out one.
  c.facts = dict(num_people=20, forget_frac=0.3, num_world=10)
  c.model.update(dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 mlp_dim=192)
  # max_len / max_new_tokens fit the longest prompt + answer (105 / 50 bytes).
  c.pretrain = dict(steps=300, batch_size=32, lr=3e-3, warmup_steps=30,
                    max_len=112)
  # Questions per group (0 = all): known facts, known facts with the held-out
  # paraphrase, held-out facts.
  c.questions = dict(known=20, paraphrased=20, heldout=0)
  c.sampling = dict(num_samples=10, temperature=1.0, max_new_tokens=56,
                    batch_size=256)
  # semantic clustering: StringMatchEntailment(mode) on key(answer);
  # key "last_word" = the fact value at the end of the answer sentence.
  c.cluster = dict(mode="normalised", key="last_word", strict=False)
  c.qtn = dict(grid_size=32, num_operators=120, num_modes=8,
               bandwidth_factor=5.0, perturb_scale=1e-3, perturb_lambda=1.0,
               perturb_norm="abs_sum", denominator="first_order",
               mode_state="corrected")
  c.lambdas = (5.0, 15.0, 25.0, 50.0, 75.0, 100.0)
  c.additive_lambdas = (5.0,)
  c.compare_lambda = 25.0  # the SE_R+ row the comparisons use
  c.bootstrap = dict(num_resamples=1000, confidence=0.9)
  if args.smollm2:  # the real pretrained model on data.short_qa
    # Seeds = question subsets (a different shuffle of the question set)
    # and sampling keys. Categories chosen so that the greedy accuracy is
    # neither ~0 nor ~1 (measured: docs/papers/uncertainty.md).
    c.init_from = "smollm2-135m-instruct"
    c.qa = dict(categories="capital,antonym,plural,successor,fact",
                num_questions=24, system="Answer with one word only.")
    c.sampling.update(max_new_tokens=12, batch_size=120, pad_multiple=32)
    # Clustering = the extracted short answer (data.short_qa.cluster_key).
  if args.tiny:
    c.seeds = (0,)
    c.facts.update(num_people=10, num_world=4)
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.pretrain.update(steps=60, batch_size=16, warmup_steps=5)
    c.questions.update(known=8, paraphrased=4)
    c.sampling.update(num_samples=6)
    c.bootstrap.update(num_resamples=200)
  if args.smoke:  # plumbing only: no training (steps=0)
    c.pretrain.update(steps=0)
    c.questions.update(known=4, paraphrased=2, heldout=6)
    c.sampling.update(num_samples=4, max_new_tokens=16)
    c.qtn.update(grid_size=16, num_operators=39, num_modes=4)
    c.lambdas = (5.0, 25.0)
    c.bootstrap.update(num_resamples=50)
  if args.paper:
    scale.preset(c, PAPER)
    # `data.schema` names the adapter of the released set
    # (jaxlab/data/qa_rows.py): trivia_qa (here), nq_open
    # (google-research-datasets/nq_open, subset nq_open), squad
    # (rajpurkar/squad_v2, subset squad_v2) or svamp (ChilleD/SVAMP,
    # subset default, eval split test).
    scale.paper_run(c, init_from="mistralai/Mistral-7B-v0.1",
                    path="mandarjoshi/trivia_qa", subset="rc.nocontext",
                    split="train", eval_split="validation",
                    schema="trivia_qa")
    # Every validation row (the SE code asks up to 400 questions, spec J.1:
    # --config.data.max_rows=400).
    # The SE code's defaults: 5-shot prompt from train, R = 10 samples at
    # T = 1, <= 50 new tokens; entailment by an LM (EntailmentLlama's
    # prompt, <= 30 new tokens), here the answering model itself unless
    # `cluster.entailment_from` names another checkpoint.
    c.qa_prompt = ml_collections.ConfigDict(dict(num_few_shot=5, pool=200))
    c.sampling.update(num_samples=10, temperature=1.0, max_new_tokens=50,
                      batch_size=88)
    c.cluster.update(entailment="lm", entailment_from="", max_new_tokens=30)
  if args.short:
    scale.short(c)
  return c
