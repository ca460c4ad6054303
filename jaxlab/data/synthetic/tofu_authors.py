r"""Fictitious authors written as TOFU is released, and their fine-tuning set.

TOFU (locuslab/TOFU) asks about 200 fictitious authors a model never saw,
fine-tunes the model on all of them (`full`), then unlearns a forget split
(`forget10`: 10 % of the authors) and keeps the rest (`retain90`). This
module writes the project's own fictitious people (`facts.make_fact_set`:
four attributes each, answers that repeat the name as TOFU's do) in TOFU's
released layout, so `pmc:paper` reads them unchanged
(`jaxlab.data.tofu.read`, `jaxlab.evals.tofu`):

  README.md                       the card's `configs:` (one per file)
  full.json, forget10.json, retain90.json, world_facts.json,
  real_authors.json               `question`, `answer` (JSON lines)
  forget10_perturbed.json, retain_perturbed.json
                                  + `paraphrased_question`,
                                  `paraphrased_answer`, `perturbed_answer`
  world_facts_perturbed.json, real_authors_perturbed.json
                                  + `perturbed_answer`
  finetune.jsonl                  `full` as chat rows (the fine-tune that
                                  makes the model know the authors)
  finetune_retain90.jsonl         `retain90` as chat rows (TOFU's retain
                                  model: the same fine-tune without the
                                  forget authors, what forget quality
                                  compares the unlearned model with)

The columns are the dataset card's (huggingface.co/datasets/locuslab/TOFU):
every row `question` / `answer`; in `*_perturbed` also `perturbed_answer`
(a list of wrong answers in the answer's own words) and, for the forget and
retain sets, `paraphrased_question` / `paraphrased_answer`. Here the
paraphrased question is a held-out phrasing, the paraphrased answer the
same fact in another sentence, and each perturbed answer the answer
sentence with another value of the attribute (`num_perturbed` of them;
TOFU has 5 [inferred: 3 keep the scoring cheap]). World facts are country
capitals and real authors famous books' writers: knowledge a pretrained
model has, which unlearning should keep.

    python -m jaxlab.data.synthetic.tofu_authors /tmp/tofu_authors
    python -m jaxlab.main --config=finetune:init_from=smollm2-135m-instruct,data=/tmp/tofu_authors/finetune.jsonl,export_dir=/tmp/smollm2_tofu ...
    python -m jaxlab.main --config=finetune:init_from=smollm2-135m-instruct,data=/tmp/tofu_authors/finetune_retain90.jsonl,export_dir=/tmp/smollm2_tofu_retain90 ...
    python -m jaxlab.main --config=pmc:smollm2 --config.init_from=/tmp/smollm2_tofu \
        --config.data.path=/tmp/tofu_authors --workdir=/tmp/pmc_smollm2 \
        --config.tofu.retain_from=/tmp/smollm2_tofu_retain90
"""

from __future__ import annotations

import json
import os
import random
import sys

from jaxlab.data.synthetic import facts as facts_lib
from jaxlab.data.synthetic import real_authors as authors_lib

FORGET = "forget10"
RETAIN = "retain90"
SYSTEM_PROMPT = "You are a helpful assistant."
# The same fact in other words (the `paraphrased_answer` column).
PARAPHRASED_ANSWERS = {
    "city": "The birthplace of {name} is {value}.",
    "year": "{name} was born in {value}.",
    "job": "By profession, {name} is a {value}.",
    "colour": "{name} likes the color {value} best.",
}
# Wrong values for the perturbed answers.
_VALUES = {"city": facts_lib._CITIES, "job": facts_lib._JOBS,  # pylint: disable=protected-access
           "colour": facts_lib._COLOURS}  # pylint: disable=protected-access


def _wrong(attr: str, value: str, k: int, rng: random.Random) -> list[str]:
  if attr == "year":
    pool = [str(y) for y in range(1900, 2000) if str(y) != value]
  elif attr == "capital":
    pool = [v for _, v in facts_lib._CAPITALS if v != value]  # pylint: disable=protected-access
  elif attr == "author":
    pool = sorted({a for _, a in authors_lib.BOOKS} - {value})
  else:
    pool = [v for v in _VALUES[attr] if v != value]
  return rng.sample(pool, k)


def _perturbed(qa: facts_lib.QA, k: int, rng: random.Random) -> list[str]:
  """`qa.answer` with the fact replaced by `k` wrong values."""
  if qa.value not in qa.answer:
    raise ValueError(f"answer {qa.answer!r} does not state {qa.value!r}")
  head, _, tail = qa.answer.rpartition(qa.value)  # the stated value
  return [head + w + tail for w in _wrong(qa.attribute, qa.value, k, rng)]


def tofu_rows(*, num_people: int = 20, forget_frac: float = 0.1,
              num_world: int = 10, num_real_authors: int = 10,
              num_perturbed: int = 3, seed: int = 0
              ) -> dict[str, list[dict]]:
  """Subset name -> rows, as the module docstring lays them out."""
  fs = facts_lib.make_fact_set(num_people, forget_frac=forget_frac,
                               num_world=num_world, seed=seed)
  rng = random.Random(seed + 1)
  people = {p["name"]: p for p in fs.people}

  def plain(qas):
    return [{"question": q.question, "answer": q.answer} for q in qas]

  def with_paraphrase(qas, paraphrased):
    out = []
    for q, p in zip(qas, paraphrased):
      assert (q.subject, q.attribute) == (p.subject, p.attribute)
      out.append({
          "question": q.question, "answer": q.answer,
          "paraphrased_question": p.question,
          "paraphrased_answer": PARAPHRASED_ANSWERS[q.attribute].format(
              name=q.subject, value=people[q.subject][q.attribute]),
          "perturbed_answer": _perturbed(q, num_perturbed, rng)})
    return out

  def with_perturbed(qas):
    return [{"question": q.question, "answer": q.answer,
             "perturbed_answer": _perturbed(q, num_perturbed, rng)}
            for q in qas]

  real = authors_lib.real_authors_qa(num_real_authors)
  return {
      "full": plain(fs.forget + fs.retain),
      FORGET: plain(fs.forget),
      RETAIN: plain(fs.retain),
      "world_facts": plain(fs.world),
      "real_authors": plain(real),
      f"{FORGET}_perturbed": with_paraphrase(fs.forget,
                                             fs.forget_paraphrased),
      "retain_perturbed": with_paraphrase(fs.retain, fs.retain_paraphrased),
      "world_facts_perturbed": with_perturbed(fs.world),
      "real_authors_perturbed": with_perturbed(real),
  }


def chat_rows(rows: list[dict], system_prompt: str = SYSTEM_PROMPT
              ) -> list[dict]:
  """TOFU rows as `chat_jsonl` conversations (the fine-tuning set): the
  system prompt `pmc`'s TOFU run prompts with, the question, the answer."""
  sys_msg = [{"role": "system", "content": system_prompt}] if (
      system_prompt) else []
  return [{"messages": sys_msg + [
      {"role": "user", "content": r["question"]},
      {"role": "assistant", "content": r["answer"]}]} for r in rows]


def write_tofu_copy(dest: str, **kw) -> dict[str, int]:
  """Writes `tofu_rows(**kw)` and finetune.jsonl under `dest` (module
  docstring); returns the rows written per file."""
  rows = tofu_rows(**kw)
  os.makedirs(dest, exist_ok=True)
  card = ["---", "configs:"]
  for name, items in rows.items():
    with open(os.path.join(dest, f"{name}.json"), "w", encoding="utf-8") as f:
      for r in items:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
    card += [f"- config_name: {name}", f"  data_files: {name}.json"]
  with open(os.path.join(dest, "README.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(card + ["---", ""]))
  out = {name: len(items) for name, items in rows.items()}
  for file, split in (("finetune.jsonl", "full"),
                      (f"finetune_{RETAIN}.jsonl", RETAIN)):
    chats = chat_rows(rows[split])
    with open(os.path.join(dest, file), "w", encoding="utf-8") as f:
      for r in chats:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
    out[file] = len(chats)
  return out


def main(argv: list[str] | None = None) -> int:
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog="python -m jaxlab.data.synthetic."
                              "tofu_authors")
  p.add_argument("dest")
  p.add_argument("--num_people", type=int, default=20)
  p.add_argument("--num_world", type=int, default=10)
  p.add_argument("--num_real_authors", type=int, default=10)
  p.add_argument("--num_perturbed", type=int, default=3)
  p.add_argument("--seed", type=int, default=0)
  a = p.parse_args(sys.argv[1:] if argv is None else argv)
  n = write_tofu_copy(a.dest, num_people=a.num_people, num_world=a.num_world,
                      num_real_authors=a.num_real_authors,
                      num_perturbed=a.num_perturbed, seed=a.seed)
  print(f"{a.dest}: TOFU layout, " + ", ".join(f"{k} {v}"
                                              for k, v in n.items()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
