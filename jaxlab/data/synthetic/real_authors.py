"""A "real authors" QA split: who wrote a well-known book (spec B.10).

TOFU's utility averages ROUGE-L recall over three sets: the retain set,
world facts and *real authors* (questions about real, famous writers the
model knew before the fictitious-author fine-tune). The synthetic fact set
(`jaxlab.data.synthetic.facts`) has retain and world splits; this module is
the third. A tiny model trained from scratch learns these together with the
rest (nothing is unlearned here), so their recall measures collateral damage
on knowledge about *real* people, as in the paper.
"""

from __future__ import annotations

from jaxlab.data.synthetic import facts as facts_lib

BOOKS = (("Pride and Prejudice", "Jane Austen"),
         ("Hamlet", "William Shakespeare"),
         ("War and Peace", "Leo Tolstoy"),
         ("Moby Dick", "Herman Melville"),
         ("Don Quixote", "Miguel de Cervantes"),
         ("The Trial", "Franz Kafka"),
         ("Beloved", "Toni Morrison"),
         ("Ulysses", "James Joyce"),
         ("Middlemarch", "George Eliot"),
         ("The Odyssey", "Homer"),
         ("Things Fall Apart", "Chinua Achebe"),
         ("Dracula", "Bram Stoker"),
         ("Frankenstein", "Mary Shelley"),
         ("Les Miserables", "Victor Hugo"),
         ("The Stranger", "Albert Camus"),
         ("Lolita", "Vladimir Nabokov"),
         ("Emma", "Jane Austen"),
         ("Faust", "Johann Wolfgang von Goethe"),
         ("Walden", "Henry David Thoreau"),
         ("Gitanjali", "Rabindranath Tagore"))

QUESTION = "Who wrote the book {book}?"
ANSWER = "The book {book} was written by {author}."


def real_authors_qa(num: int = 20) -> list[facts_lib.QA]:
  """The first `num` (book, author) pairs as `QA` (value = the author)."""
  if not 0 <= num <= len(BOOKS):
    raise ValueError(f"num real authors must be in [0, {len(BOOKS)}], "
                     f"got {num}")
  return [facts_lib.QA(QUESTION.format(book=b),
                       ANSWER.format(book=b, author=a), a, "author", a)
          for b, a in BOOKS[:num]]
