"""Thinking-budget decoding: think up to a budget, then force the answer.

    responses, used = budget_forced(model, tok, frames, prompts, budget=96,
                                    answer_tokens=48)

With `budget > 0` each prompt is continued after `think` (" Think:") for
at most `budget` tokens, the text cut at the first `final` marker, and the
answer decoded after `prompt + think + thinking + final`; with 0 the answer
follows the prompt at once. Decoding is greedy through `model.generate(
prefix_inputs, prompts, ...)` (a `jaxlab.models.prefix_lm.PrefixLM`, e.g.
the video LM). Responses read "Final Answer:<decoded answer>".
"""

from __future__ import annotations

THINK = " Think:"
FINAL = " Final Answer:"


def budget_forced(model, tok, prefix_inputs, prompts, *, budget: int,
                  answer_tokens: int, think: str = THINK,
                  final: str = FINAL) -> tuple[list[str], float]:
  """(responses, mean thinking tokens used per prompt)."""
  final_ids = tok.encode(final)
  used = 0.0
  if budget > 0:
    stage1 = [p + tok.encode(think) for p in prompts]
    out = model.generate(prefix_inputs, stage1, max_new_tokens=budget,
                         eos_id=tok.eos_id)
    prompts2 = []
    for p, toks in zip(stage1, out.tokens):
      text = tok.decode([t for t in toks if t != tok.eos_id])
      text = text.split(final.strip())[0].rstrip()
      think_ids = tok.encode(text)
      used += len(think_ids)
      prompts2.append(p + think_ids + final_ids)
    used /= max(len(prompts), 1)
  else:
    prompts2 = [p + final_ids for p in prompts]
  out = model.generate(prefix_inputs, prompts2, max_new_tokens=answer_tokens,
                       eos_id=tok.eos_id)
  responses = [final.strip() + tok.decode([t for t in toks
                                           if t != tok.eos_id])
               for toks in out.tokens]
  return responses, used
