"""Released QA rows -> (question, references) and the SE code's prompts."""

from absl.testing import absltest

from jaxlab.data import qa_rows


# --- Reference: the semantic-entropy code (github.com/jlko/
# semantic_uncertainty, commit b48e3c1): `uncertainty/utils/utils.py`
# `construct_fewshot_prompt_from_indices`, `BRIEF_PROMPTS["default"]` and
# `generate_answers.py`'s `make_prompt` (use_context a closure argument).
def _ref_make_prompt(use_context):
  def make_prompt(context, question, answer, brief, brief_always):
    prompt = ""
    if brief_always:
      prompt += brief
    if use_context and (context is not None):
      prompt += f"Context: {context}\n"
    prompt += f"Question: {question}\n"
    if answer:
      prompt += f"Answer: {answer}\n\n"
    else:
      prompt += "Answer:"
    return prompt
  return make_prompt


def _ref_fewshot(dataset, example_indices, brief, brief_always, make_prompt):
  prompt = brief if not brief_always else ""
  for example_index in example_indices:
    example = dataset[example_index]
    prompt = prompt + make_prompt(example["context"], example["question"],
                                  example["answers"]["text"][0], brief,
                                  brief_always)
  return prompt


BRIEF = "Answer the following question as briefly as possible.\n"

# Rows in the released schemas (dataset cards: mandarjoshi/trivia_qa
# rc.nocontext, google-research-datasets/nq_open, rajpurkar/squad_v2,
# ChilleD/SVAMP).
TRIVIA = {"question": "Which planet is the Red Planet?", "question_id": "tq1",
          "question_source": "http://www.example.org",
          "entity_pages": {"doc_source": [], "filename": [], "title": [],
                           "wiki_context": []},
          "search_results": {"description": [], "filename": [], "rank": [],
                             "title": [], "url": [], "search_context": []},
          "answer": {"aliases": ["Mars", "Planet Mars", "Mars"],
                     "normalized_aliases": ["mars", "planet mars"],
                     "matched_wiki_entity_name": "",
                     "normalized_matched_wiki_entity_name": "",
                     "normalized_value": "mars", "type": "WikipediaEntity",
                     "value": "Mars"}}
NQ = {"question": "who wrote the origin of species",
      "answer": ["Charles Darwin", "Darwin"]}
SQUAD = {"id": "s1", "title": "Normans", "context": "The Normans were ...",
         "question": "In what country is Normandy located?",
         "answers": {"text": ["France", "France"],
                     "answer_start": [159, 159]}}
SQUAD_UNANSWERABLE = {"id": "s2", "title": "Normans", "context": "...",
                      "question": "Who gave their name to Normandy in the "
                      "1000's?", "answers": {"text": [], "answer_start": []}}
SVAMP = {"ID": "chal-1", "Body": "Each pack has 4 pencils. Jo buys 2 packs.",
         "Question": "How many pencils does Jo have?",
         "Equation": "( 4.0 * 2.0 )", "Answer": 8.0,
         "Type": "Multiplication"}


class QaRowsTest(absltest.TestCase):

  def test_adapters(self):
    got, dropped = qa_rows.items([TRIVIA], "trivia_qa")
    self.assertEqual((got[0].question, got[0].answers, dropped),
                     ("Which planet is the Red Planet?",
                      ("Mars", "Planet Mars"), 0))
    got, _ = qa_rows.items([NQ], "nq_open")
    # The SE code appends "?" to NQ-Open questions.
    self.assertEqual((got[0].question, got[0].answers),
                     ("who wrote the origin of species?",
                      ("Charles Darwin", "Darwin")))
    got, dropped = qa_rows.items([SQUAD, SQUAD_UNANSWERABLE], "squad")
    self.assertEqual((len(got), dropped, got[0].answers, got[0].use_context),
                     (1, 1, ("France",), False))
    got, _ = qa_rows.items([SVAMP], "svamp")
    self.assertEqual((got[0].question, got[0].context, got[0].answers,
                      got[0].use_context),
                     (SVAMP["Question"], SVAMP["Body"], ("8",), True))
    got, _ = qa_rows.items([dict(SVAMP, Answer=2.5)], "svamp")
    self.assertEqual(got[0].answers, ("2.5",))
    # SimpleQA (simple-evals' simple_qa_test_set.csv columns).
    got, _ = qa_rows.items([{
        "metadata": "{'topic': 'Geography', 'answer_type': 'Place', "
                    "'urls': []}",
        "problem": "Where is Radcliffe College?", "answer": "Cambridge"}],
                           "simpleqa")
    self.assertEqual((got[0].question, got[0].answers, got[0].use_context),
                     ("Where is Radcliffe College?", ("Cambridge",), False))

  def test_prompts_equal_the_se_code(self):
    se_rows = [  # the SE code's reformatted rows
        {"context": SVAMP["Body"], "question": SVAMP["Question"],
         "answers": {"text": ["8"]}},
        {"context": "Two boxes of 3.", "question": "How many in all?",
         "answers": {"text": ["6"]}}]
    items = [qa_rows.QAItem(r["question"], tuple(r["answers"]["text"]),
                            r["context"], use_context=True) for r in se_rows]
    make = _ref_make_prompt(use_context=True)
    want = _ref_fewshot(se_rows, [0, 1], BRIEF, False, make)
    self.assertEqual(qa_rows.few_shot_prompt(items), want)
    self.assertEqual(qa_rows.prompt(items[0], want),
                     want + make(SVAMP["Body"], SVAMP["Question"], None,
                                 BRIEF, False))
    # Without context (TriviaQA, NQ, SQuAD as the SE code runs them).
    trivia, _ = qa_rows.items([TRIVIA], "trivia_qa")
    make = _ref_make_prompt(use_context=False)
    self.assertEqual(
        qa_rows.few_shot_prompt(trivia),
        _ref_fewshot([{"context": "", "question": TRIVIA["question"],
                       "answers": {"text": ["Mars"]}}], [0], BRIEF, False,
                     make))

  def test_errors_are_named(self):
    with self.assertRaisesRegex(ValueError, "unknown QA dataset schema"):
      qa_rows.items([NQ], "hotpot")
    with self.assertRaisesRegex(ValueError, "svamp rows need columns Body"):
      qa_rows.items([NQ], "svamp")


if __name__ == "__main__":
  absltest.main()
